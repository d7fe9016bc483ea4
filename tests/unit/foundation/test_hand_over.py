"""A slot freed by a step goes to its first waiter in the invocation that freed it: the waiter's step runs
there once the freeing step is committed, rather than after a wake message waits for the wake lane."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.dispatch import HANDED_OVER, Dispatcher
from nodecycle.domain.engine import Handled, Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import Script, World, make_record

HOLDER = "i-0123456789abcdef0/terminate/token"
WAITERS = ("i-0aaaaaaaaaaaaaaa1/terminate/token", "i-0aaaaaaaaaaaaaaa2/terminate/token")
PLAN = (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE)


def waiting(record_id: str) -> LifecycleRecord:
    """A lifecycle that asked for a slot and asks again in 30 s."""
    instance = record_id.split("/")[0]
    return make_record(
        PLAN,
        id=record_id,
        instance_id=instance,
        seq=3,
        slot_waiting_since=T0,
        due_at=T0 + timedelta(seconds=30),
    )


def releasing(
    world: World,
    then: Exception | None = None,
    taking: float = 0,
    *,
    waking: tuple[str, ...] = WAITERS,
    outcome: Outcome | None = None,
) -> Callable[[LifecycleRecord, datetime], Outcome]:
    """The holder's cleanup: its release passes its slots on to the ``waking`` waiters (as
    DisruptionBudget.release returns them), which it wakes in that order; what it does after the release takes
    ``taking`` seconds. (With an ``outcome``: another step whose budget write frees slots, a poll's renewal
    that removed an expired holder.)"""
    dispatcher = Dispatcher(
        records=world.records, queues=world.queues, clock=world.clock, metrics=world.metrics
    )

    def cleanup(record: LifecycleRecord, now: datetime) -> Outcome:
        for waiter in waking:
            dispatcher.wake(waiter)
        world.clock.advance(taking)
        if then is not None:
            raise then
        return outcome or Outcome.next()

    return cleanup


def given_a_holder_and_two_waiters(world: World) -> None:
    world.records.create(make_record(PLAN, Step.CLEANUP, completed_at=T0))
    for waiter in WAITERS:
        world.records.create(waiting(waiter))


def test_the_first_waiter_runs_in_the_invocation_that_freed_its_slot_and_the_others_get_their_wake() -> None:
    # Given a holder about to release, and two waiters its release passes slots on to
    world = World()
    given_a_holder_and_two_waiters(world)
    acquire, cordon = Script([Outcome.next()]), Script([Outcome.wait(5)])
    engine = world.engine({Step.CLEANUP: releasing(world), Step.ACQUIRE_SLOT: acquire, Step.CORDON: cordon})

    # When the holder's cleanup runs
    handled = engine.handle(world.message(HOLDER))

    # Then its own lifecycle is done, and the first waiter took its slot and was cordoned in the same
    # invocation, its drain's next poll queued; the second waiter was sent its wake-up at once
    assert handled is Handled.DONE
    first, second = (world.records.get(waiter) for waiter in WAITERS)
    assert first is not None
    assert second is not None
    assert (first.step, len(acquire.runs), len(cordon.runs)) == (Step.CORDON, 1, 1)
    assert second.step is Step.ACQUIRE_SLOT
    sent = [(s.worker, s.message.record_id, s.message.wake, s.delay) for s in world.queues.take()]
    assert sorted(sent) == sorted([(Worker.WAKE, WAITERS[1], True, 0), (Worker.DRAIN, WAITERS[0], False, 5)])
    assert world.metrics.counts.get("SlotsHandedOver") == 1


def test_a_waiter_is_sent_its_wake_when_the_invocation_has_no_time_left_to_run_it() -> None:
    world = World()
    given_a_holder_and_two_waiters(world)
    acquire = Script([])
    engine = world.engine({Step.CLEANUP: releasing(world), Step.ACQUIRE_SLOT: acquire})

    # When the holder's cleanup runs with less than the inline budget left
    engine.handle(world.message(HOLDER), time_left=lambda: 10.0)

    # Then no waiter ran here: both were sent their wake-ups
    assert acquire.runs == []
    sent = [(s.worker, s.message.record_id, s.message.wake) for s in world.queues.take()]
    assert sent == [(Worker.WAKE, WAITERS[0], True), (Worker.WAKE, WAITERS[1], True)]


def test_a_step_that_fails_after_freeing_a_slot_still_wakes_its_waiters() -> None:
    # Given a holder whose cleanup fails after its release (a bug, an API error it does not expect)
    world = World()
    given_a_holder_and_two_waiters(world)
    acquire = Script([])
    engine = world.engine(
        {Step.CLEANUP: releasing(world, then=RuntimeError("boom")), Step.ACQUIRE_SLOT: acquire}
    )

    # When its message is handled, and fails (SQS redelivers it)
    with pytest.raises(RuntimeError):
        engine.handle(world.message(HOLDER))

    # Then neither waiter ran in the failed invocation, and both were sent their wake-ups
    assert acquire.runs == []
    sent = [(s.worker, s.message.record_id, s.message.wake) for s in world.queues.take()]
    assert sorted(sent) == [(Worker.WAKE, WAITERS[0], True), (Worker.WAKE, WAITERS[1], True)]


def test_a_handed_over_step_that_fails_goes_to_the_wake_lane_and_the_freeing_message_succeeds() -> None:
    # Given a waiter whose step fails when it runs (the API server it asks refuses)
    world = World()
    given_a_holder_and_two_waiters(world)
    acquire = Script([RuntimeError("the API server refused")])
    engine = world.engine({Step.CLEANUP: releasing(world), Step.ACQUIRE_SLOT: acquire})

    # When the holder's cleanup runs
    handled = engine.handle(world.message(HOLDER))

    # Then the holder's message succeeds, the waiter's step ran once here, and it is sent its wake-up, as the
    # other waiter is: the wake lane runs it again
    assert handled is Handled.DONE
    assert len(acquire.runs) == 1
    sent = [(s.worker, s.message.record_id, s.message.wake) for s in world.queues.take()]
    assert sorted(sent) == [(Worker.WAKE, WAITERS[0], True), (Worker.WAKE, WAITERS[1], True)]


def test_a_waiter_is_sent_its_wake_when_the_freeing_step_used_up_the_time_to_run_it() -> None:
    # Given a holder whose cleanup takes 50 s after its release (its Events and its heartbeat answered slowly),
    # in an invocation with 60 s left when it starts
    world = World()
    given_a_holder_and_two_waiters(world)
    acquire = Script([Outcome.next()])
    engine = world.engine({Step.CLEANUP: releasing(world, taking=50), Step.ACQUIRE_SLOT: acquire})
    ends = world.clock.now() + timedelta(seconds=60)

    # When the holder's cleanup runs: 60 s left at the release, 10 s once its record is committed
    engine.handle(world.message(HOLDER), time_left=lambda: (ends - world.clock.now()).total_seconds())

    # Then the first waiter's step is not begun with less than the inline budget left (the invocation's end
    # could cut it short, and its wake-up with it: its slot idle until its own retry): it is sent its wake-up,
    # as the second waiter is
    assert acquire.runs == [], "the waiter's step ran with 10 s left, and no wake-up was sent for it"
    sent = [(s.worker, s.message.record_id, s.message.wake) for s in world.queues.take()]
    assert sorted(sent) == [(Worker.WAKE, WAITERS[0], True), (Worker.WAKE, WAITERS[1], True)]


def test_a_wake_up_sqs_refuses_is_not_counted_as_a_waiter_woken() -> None:
    # Given a waiter, and SQS refusing its wake-up (throttled), as the adapter raises it
    world = World()
    world.records.create(waiting(WAITERS[0]))
    dispatcher = Dispatcher(
        records=world.records, queues=world.queues, clock=world.clock, metrics=world.metrics
    )

    def refusing(worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        raise TransientError("sending work to the wake queue: throttled")

    world.queues.send = refusing  # type: ignore[method-assign]

    # When a release wakes it outside a step (the sweeper's wake-ups), and the wake-up fails
    with pytest.raises(TransientError):
        dispatcher.wake(WAITERS[0])

    # Then no waiter is counted as woken: none was
    assert world.metrics.counts.get("WaitersWoken", 0) == 0


def test_a_handed_over_waiter_that_had_moved_on_is_not_counted_as_a_slot_handed_over() -> None:
    # Given a holder about to release, and a waiter whose own retry takes the slot passed on to it (and
    # commits its cordon next) while the holder's cleanup is still running
    world = World()
    given_a_holder_and_two_waiters(world)
    release = releasing(world)

    def cleanup(record: LifecycleRecord, now: datetime) -> Outcome:
        outcome = release(record, now)
        first = world.records.get(WAITERS[0])
        assert first is not None
        moved = first.model_copy(update={"step": Step.CORDON, "seq": first.seq + 1})
        assert world.records.commit(moved, expected_seq=first.seq)
        return outcome

    acquire = Script([])
    engine = world.engine({Step.CLEANUP: cleanup, Step.ACQUIRE_SLOT: acquire})

    # When the holder's cleanup runs
    engine.handle(world.message(HOLDER))

    # Then the first waiter's step did not run here (its wake-up found it moved on, as the wake lane would
    # have), and no slot is counted as handed over in this invocation
    assert acquire.runs == []
    assert world.metrics.counts.get("SlotsHandedOver", 0) == 0


# -- the cases that could leave a slot idle, or run what a wake-up would not: each behaves as a wake-up would --


def test_a_waiter_still_runs_when_the_freeing_steps_commit_loses_to_another_delivery() -> None:
    # Given a holder's cleanup delivered twice, the other delivery committing first (after both released)
    world = World()
    given_a_holder_and_two_waiters(world)
    release = releasing(world)

    def cleanup(record: LifecycleRecord, now: datetime) -> Outcome:
        outcome = release(record, now)
        assert world.records.commit(
            record.model_copy(update={"seq": record.seq + 1}), expected_seq=record.seq
        )
        return outcome

    acquire, cordon = Script([Outcome.next()]), Script([Outcome.wait(5)])
    engine = world.engine({Step.CLEANUP: cleanup, Step.ACQUIRE_SLOT: acquire, Step.CORDON: cordon})

    # When this delivery's commit loses
    handled = engine.handle(world.message(HOLDER))

    # Then the slot its release passed on is not left idle: the first waiter ran here all the same
    assert handled is Handled.CONFLICT
    first = world.records.get(WAITERS[0])
    assert first is not None
    assert (first.step, len(acquire.runs)) == (Step.CORDON, 1)


def test_a_waiter_still_runs_when_the_freeing_step_fails_transiently_after_the_wake_up() -> None:
    # Given a holder whose cleanup fails transiently after its release: SQS refuses the second waiter's wake-up
    world = World()
    given_a_holder_and_two_waiters(world)
    original = world.queues.send

    def send(worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        if message.wake and message.record_id == WAITERS[1]:
            raise TransientError("sending work to the wake queue: throttled")
        original(worker, message, delay_seconds)

    world.queues.send = send  # type: ignore[method-assign]
    acquire, cordon = Script([Outcome.next()]), Script([Outcome.wait(5)])
    engine = world.engine({Step.CLEANUP: releasing(world), Step.ACQUIRE_SLOT: acquire, Step.CORDON: cordon})

    # When the holder's cleanup runs
    handled = engine.handle(world.message(HOLDER))

    # Then the cleanup is retried (its repeated release wakes the second waiter again), and the first waiter,
    # kept before the failure, ran here
    assert handled is Handled.RAN
    holder, first = world.records.get(HOLDER), world.records.get(WAITERS[0])
    assert holder is not None
    assert first is not None
    assert (holder.step, holder.attempts) == (Step.CLEANUP, 1)
    assert (first.step, len(acquire.runs)) == (Step.CORDON, 1)


def _failing_commit(world: World) -> None:
    """The record store refuses the holder's commit (DynamoDB throttled), as the adapter raises it."""
    original = world.records.commit

    def commit(record: LifecycleRecord, expected_seq: int) -> bool:
        if record.id == HOLDER:
            raise TransientError("writing the lifecycle record: throttled")
        return original(record, expected_seq)

    world.records.commit = commit  # type: ignore[method-assign]


def _failing_heartbeat(world: World) -> None:
    """Auto Scaling answers the holder's heartbeat, due with its commit, with an error the engine does not
    expect (not a throttle)."""

    def heartbeat(action: object) -> bool:
        raise RuntimeError("AccessDenied: autoscaling:RecordLifecycleActionHeartbeat")

    world.autoscaling.heartbeat = heartbeat  # type: ignore[method-assign]


@pytest.mark.parametrize("failing", [_failing_commit, _failing_heartbeat])
def test_a_waiter_is_sent_its_wake_when_the_freeing_invocation_fails_after_its_step(
    failing: Callable[[World], None],
) -> None:
    # Given a drain's poll whose renewal removed an expired holder (it wakes both waiters, then waits 5 s),
    # late enough that its commit comes with a heartbeat, and its commit or its heartbeat failing
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT))
    for waiter in WAITERS:
        world.records.create(waiting(waiter))
    world.clock.advance(240)
    failing(world)
    acquire = Script([])
    poll = releasing(world, outcome=Outcome.wait(5))
    engine = world.engine({Step.EVICT: poll, Step.ACQUIRE_SLOT: acquire})

    # When the poll runs, and its invocation fails after the step
    with pytest.raises((TransientError, RuntimeError)):
        engine.handle(world.message(HOLDER))

    # Then neither waiter ran in the failed invocation, and both were sent their wake-ups
    assert acquire.runs == []
    sent = [(s.worker, s.message.record_id, s.message.wake) for s in world.queues.take()]
    assert sorted(sent) == [(Worker.WAKE, WAITERS[0], True), (Worker.WAKE, WAITERS[1], True)]


def test_a_slot_the_handed_over_step_frees_in_turn_wakes_its_waiter_through_the_wake_lane() -> None:
    # Given a holder whose release passes its slot on to the first waiter only, a drain paused for want of a
    # slot, whose poll's renewal then removes an expired holder, passing that slot on to the second waiter
    world = World()
    world.records.create(make_record(PLAN, Step.CLEANUP, completed_at=T0))
    world.records.create(waiting(WAITERS[0]).model_copy(update={"step": Step.EVICT, "drain_paused_at": T0}))
    world.records.create(waiting(WAITERS[1]))
    poll = releasing(world, waking=WAITERS[1:], outcome=Outcome.wait(1))
    acquire = Script([Outcome.wait(30)])
    engine = world.engine(
        {Step.CLEANUP: releasing(world, waking=WAITERS[:1]), Step.EVICT: poll, Step.ACQUIRE_SLOT: acquire}
    )

    # When the holder's cleanup runs
    engine.handle(world.message(HOLDER))

    # Then one hand-over per invocation: the paused drain polled here, and the second waiter, woken by that
    # poll, was sent its wake-up at once (neither kept nor run here: no chain of hand-overs through every
    # waiter in line, each in the time of the invocation that freed the first slot)
    assert acquire.runs == []
    sent = [(s.worker, s.message.record_id, s.message.wake) for s in world.queues.take()]
    assert sorted(sent) == sorted([(Worker.WAKE, WAITERS[1], True), (Worker.DRAIN, WAITERS[0], False)])
    assert world.metrics.counts.get("SlotsHandedOver") == 1


@pytest.mark.parametrize(
    "asking",
    [True, False],
    ids=["started-over-and-asking", "followed-by-a-later-lifecycle-not-asking-yet"],
)
def test_a_waiter_whose_record_holds_another_lifecycle_by_its_turn_is_not_run_here(asking: bool) -> None:
    # Given a holder whose release passes its slot on to the first waiter; while the cleanup still runs, that
    # waiter's record starts over under another token: a lifecycle asking for a slot itself (due in 30 s),
    # or one due days later that has not asked yet
    world = World()
    given_a_holder_and_two_waiters(world)
    release = releasing(world, waking=WAITERS[:1])

    def cleanup(record: LifecycleRecord, now: datetime) -> Outcome:
        outcome = release(record, now)
        first = world.records.get(WAITERS[0])
        assert first is not None
        other = first.model_copy(
            update={
                "token": "token-2",
                "seq": first.seq + 1,
                "slot_waiting_since": now if asking else None,
                "due_at": now + (timedelta(seconds=30) if asking else timedelta(days=3)),
            }
        )
        assert world.records.commit(other, expected_seq=first.seq)
        return outcome

    acquire = Script([Outcome.next()])
    engine = world.engine({Step.CLEANUP: cleanup, Step.ACQUIRE_SLOT: acquire, Step.CORDON: Script([])})

    # When the holder's cleanup runs
    engine.handle(world.message(HOLDER))

    # Then, as the waiter's wake-up would, the hand-over runs nothing of the lifecycle that holds the record now
    # (it was not the one the slot was passed on to)
    assert acquire.runs == []
    assert world.metrics.counts.get("SlotsHandedOver", 0) == 0


def test_two_invocations_running_at_once_in_one_process_each_run_the_waiter_their_own_step_woke() -> None:
    # Given two holders whose cleanups each pass a slot on to one waiter, run at once by one engine in two
    # threads of a process, each step waking its waiter only once both have begun
    world = World()
    second_holder = "i-0bbbbbbbbbbbbbbb1/terminate/token"
    given_a_holder_and_two_waiters(world)
    world.records.create(
        make_record(PLAN, Step.CLEANUP, id=second_holder, instance_id="i-0bbbbbbbbbbbbbbb1", completed_at=T0)
    )
    dispatcher = Dispatcher(
        records=world.records, queues=world.queues, clock=world.clock, metrics=world.metrics
    )
    both_running, both_woke = threading.Barrier(2, timeout=10), threading.Barrier(2, timeout=10)

    def cleanup(record: LifecycleRecord, now: datetime) -> Outcome:
        both_running.wait()
        dispatcher.wake(WAITERS[0] if record.id == HOLDER else WAITERS[1])
        both_woke.wait()
        return Outcome.next()

    ran: list[str] = []

    def acquire(record: LifecycleRecord, now: datetime) -> Outcome:
        ran.append(record.id)
        return Outcome.wait(30)

    engine = world.engine({Step.CLEANUP: cleanup, Step.ACQUIRE_SLOT: acquire})

    # When both run
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(engine.handle, world.message(holder)) for holder in (HOLDER, second_holder)]
        assert [run.result() for run in runs] == [Handled.DONE, Handled.DONE]

    # Then each invocation ran the waiter its own step woke, and no wake-up was needed
    assert sorted(ran) == sorted(WAITERS)
    assert [s.message.wake for s in world.queues.take()] == [False, False]  # the waiters' retries
    assert world.metrics.counts.get("SlotsHandedOver") == 2


class Killed(BaseException):
    """The invocation's container died (nothing in the engine may catch it)."""


class DiesOnce:
    """A step whose first run kills its invocation, and that goes on as ``then`` after."""

    def __init__(self, then: Outcome | None = None) -> None:
        self.then = then
        self.runs = 0

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        self.runs += 1
        if self.runs == 1 or self.then is None:
            raise Killed
        return self.then


def test_the_freeing_message_delivered_again_watches_the_waiter_its_killed_invocation_moved_on() -> None:
    # Given a holder about to release, and a waiter whose own retry was lost (its container killed between its
    # "wait again" commit and its message: nothing but the sweeper would run it again)
    world = World()
    given_a_holder_and_two_waiters(world)
    message = world.message(HOLDER)
    cordon = DiesOnce(then=Outcome.wait(5))
    engine = world.engine(
        {
            Step.CLEANUP: releasing(world, waking=WAITERS[:1]),
            Step.ACQUIRE_SLOT: Script([Outcome.next()]),
            Step.CORDON: cordon,
        }
    )

    # When the holder's invocation runs the waiter's step, handed the slot, and dies in the step after (the
    # waiter's slot committed, its cordon's message never sent); then the holder's message comes again
    with pytest.raises(Killed):
        engine.handle(message)
    assert world.queues.take() == []
    handled = engine.handle(message)

    # Then the holder's lifecycle is over, and the waiter is watched at its current step...
    assert handled is Handled.FINISHED
    first = world.records.get(WAITERS[0])
    assert first is not None
    assert first.step is Step.CORDON
    (watch,) = world.queues.take()
    assert (watch.message.record_id, watch.message.watch) == (WAITERS[0], first.seq)

    # ...which, still there once overdue, is sent again, and runs
    world.clock.advance(watch.delay)
    assert engine.handle(watch.message) is Handled.RESENT
    (resent,) = world.queues.take()
    assert engine.handle(resent.message) is Handled.RAN
    assert cordon.runs == 2


def test_the_freeing_message_delivered_again_wakes_the_waiter_its_killed_invocation_left_waiting() -> None:
    # Given a holder about to release, and a waiter whose own retry was lost
    world = World()
    given_a_holder_and_two_waiters(world)
    message = world.message(HOLDER)
    acquire = DiesOnce(then=Outcome.next())
    engine = world.engine(
        {
            Step.CLEANUP: releasing(world, waking=WAITERS[:1]),
            Step.ACQUIRE_SLOT: acquire,
            Step.CORDON: Script([Outcome.wait(5)]),
        }
    )

    # When the holder's invocation dies in the waiter's step, before its commit; then the holder's message comes
    # again
    with pytest.raises(Killed):
        engine.handle(message)
    assert world.queues.take() == []
    handled = engine.handle(message)

    # Then the waiter, still waiting for the slot passed on to it, takes it at once (run by this invocation)
    assert handled is Handled.FINISHED
    first = world.records.get(WAITERS[0])
    assert first is not None
    assert (first.step, acquire.runs) == (Step.CORDON, 2)
    sent = [(s.message.record_id, s.message.step, s.delay) for s in world.queues.take()]
    assert sent == [(WAITERS[0], Step.CORDON, 5)]


def test_a_duplicate_of_the_freeing_message_after_a_good_hand_over_sends_one_watch_that_ends_stale() -> None:
    # Given a holder's release whose invocation ran the waiter's step to its next message, delivered again all
    # the same (SQS delivers at least once)
    world = World()
    given_a_holder_and_two_waiters(world)
    message = world.message(HOLDER)
    engine = world.engine(
        {
            Step.CLEANUP: releasing(world, waking=WAITERS[:1]),
            Step.ACQUIRE_SLOT: Script([Outcome.next()]),
            Step.CORDON: Script([Outcome.wait(5), Outcome.wait(5)]),
        }
    )
    engine.handle(message)
    world.queues.take()

    # When the duplicate is handled, then the waiter's next poll, then the watch the duplicate sent
    assert engine.handle(message) is Handled.FINISHED
    (watch,) = world.queues.take()
    world.clock.advance(5)
    assert engine.handle(world.message(WAITERS[0])) is Handled.RAN
    world.queues.take()
    world.clock.advance(watch.delay)

    # Then the watch finds the waiter moved on, and ends: nothing sent again
    assert engine.handle(watch.message) is Handled.STALE
    assert world.queues.take() == []


def test_the_mark_of_a_kept_waiter_is_gone_at_the_next_commit_that_keeps_none() -> None:
    # Given a drain's poll that passes a slot on and keeps the waiter, then polls again without freeing any
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT))
    world.records.create(waiting(WAITERS[0]))
    poll = releasing(world, waking=WAITERS[:1], outcome=Outcome.wait(5))
    engine = world.engine({Step.EVICT: poll, Step.ACQUIRE_SLOT: Script([Outcome.wait(30)])})
    engine.handle(world.message(HOLDER))
    marked = world.records.get(HOLDER)
    assert marked is not None
    assert HANDED_OVER in marked.extra

    # When its next poll frees nothing
    world.clock.advance(5)
    engine = world.engine({Step.EVICT: Script([Outcome.wait(5)])})
    engine.handle(world.message(HOLDER))

    # Then the record no longer names the waiter
    polled = world.records.get(HOLDER)
    assert polled is not None
    assert HANDED_OVER not in polled.extra


def test_a_kept_waiter_whose_wake_up_sqs_refuses_still_runs_after_the_freeing_lifecycle_s_next_steps() -> (
    None
):
    # Given a drain's poll whose renewal removed an expired holder, passing its slot on to a waiter it keeps, and
    # whose drain is over (its next step, the completion, runs in the same invocation); and SQS refusing the
    # waiter's wake-up (throttled past the client's retries, a 5xx), as the adapter raises it
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT))
    world.records.create(waiting(WAITERS[0]))
    original = world.queues.send

    def send(worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        if message.wake:
            raise TransientError("sending work to the wake queue: throttled")
        original(worker, message, delay_seconds)

    world.queues.send = send  # type: ignore[method-assign]
    acquire, cordon = Script([Outcome.next()]), Script([Outcome.wait(5)])
    poll = releasing(world, waking=WAITERS[:1], outcome=Outcome.next())
    engine = world.engine(
        {
            Step.EVICT: poll,
            Step.COMPLETE: Script([Outcome.wait(5)]),
            Step.ACQUIRE_SLOT: acquire,
            Step.CORDON: cordon,
        }
    )

    # When the poll runs, and the invocation goes on with its lifecycle's completion
    engine.handle(world.message(HOLDER))

    # Then the waiter, whose wake-up could not be sent before the completion, still ran in this invocation once
    # the completion was done: not left with its slot idle until its own retry (up to 4 x BudgetRetrySeconds)
    first = world.records.get(WAITERS[0])
    assert first is not None
    assert (first.step, len(acquire.runs)) == (Step.CORDON, 1), "the kept waiter was dropped with its wake-up"
    assert world.metrics.counts.get("SlotsHandedOver") == 1
