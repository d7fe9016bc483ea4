"""The step engine: fencing by seq, inline steps, waits, heartbeats, the global-timeout guard, lost messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.engine import EngineTiming, Handled, Outcome, StepEngine
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import SUCCESSOR, ActionRef, LifecycleRecord, Step, Transition, global_deadline
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues

HEARTBEAT = 300
MARGIN = 60


def make_record(plan: tuple[Step, ...], step: Step | None = None, **changes: object) -> LifecycleRecord:
    record = LifecycleRecord(
        id="i-0123456789abcdef0/terminate/token",
        owner="stack-a",
        instance_id="i-0123456789abcdef0",
        transition=Transition.TERMINATING,
        token="token",
        group="nodes",
        hook="terminate",
        plan=plan,
        step=step or plan[0],
        received_at=T0,
        started_at=T0,
        updated_at=T0,
        due_at=T0,
        heartbeat_timeout=HEARTBEAT,
        heartbeat_deadline=T0 + timedelta(seconds=HEARTBEAT),
        global_deadline=global_deadline(T0, HEARTBEAT),
        verified_at=T0,  # confirmed with Auto Scaling (the tests of that confirmation set None)
    )
    return record.model_copy(update=changes)


def make_record_begun(
    began: datetime, plan: tuple[Step, ...], step: Step | None = None, **changes: object
) -> LifecycleRecord:
    """``make_record``'s record, its action started (and received) at ``began``: its heartbeat and global deadlines
    are those intake gives an action started then. For tests on a clock of their own, whose records would
    otherwise time out at T0's deadlines, months from their clock (and so never near their drains' caps)."""
    begun: dict[str, object] = {
        "received_at": began,
        "started_at": began,
        "updated_at": began,
        "due_at": began,
        "heartbeat_deadline": began + timedelta(seconds=HEARTBEAT),
        "global_deadline": global_deadline(began, HEARTBEAT),
        "verified_at": began,
    }
    return make_record(plan, step, **(begun | changes))


def kept_alive(autoscaling: FakeAutoscaling, record: LifecycleRecord, at: datetime) -> LifecycleRecord:
    """``record`` and Auto Scaling as a long lifecycle leaves them: its last heartbeat accepted at ``at``."""
    autoscaling.kept_alive(record.token, at)
    return record.renewed(at)


@dataclass
class Script:
    """A step whose outcomes are scripted; it records when it ran."""

    outcomes: list[Outcome | Exception]
    runs: list[datetime] = field(default_factory=list)

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        self.runs.append(now)
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


@dataclass
class World:
    clock: FakeClock = field(default_factory=FakeClock)
    records: InMemoryRecords = field(default_factory=InMemoryRecords)
    queues: RecordingQueues = field(default_factory=RecordingQueues)
    autoscaling: FakeAutoscaling = field(default_factory=FakeAutoscaling)
    metrics: FakeMetrics = field(default_factory=FakeMetrics)
    redelivery: float = 0  # seconds a crashed step may take to come back (0: the older tests' timing)

    def __post_init__(self) -> None:
        self.autoscaling.clock = self.clock  # Auto Scaling's timeouts run on the test's clock

    def engine(self, steps: dict[Step, object], worker: Worker = Worker.DRAIN) -> StepEngine:
        return StepEngine(
            worker=worker,
            steps=steps,  # type: ignore[arg-type]
            records=self.records,
            queues=self.queues,
            autoscaling=self.autoscaling,
            clock=self.clock,
            metrics=self.metrics,
            timing=EngineTiming(
                resume_grace=timedelta(minutes=3),
                heartbeat_margin=timedelta(seconds=MARGIN),
                redelivery=timedelta(seconds=self.redelivery),
                settle_before=timedelta(seconds=MARGIN + self.redelivery),
            ),
            failure_result=lambda record: ActionResult.ABANDON,
        )

    def message(self, record_id: str = "i-0123456789abcdef0/terminate/token") -> WorkMessage:
        record = self.records.get(record_id)
        assert record is not None
        return WorkMessage(record_id=record.id, seq=record.seq, step=record.step)

    def record(self) -> LifecycleRecord:
        (record,) = self.records.items.values()
        return record


PLAN = (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.RELEASE_EIP, Step.COMPLETE, Step.CLEANUP, Step.DONE)


def test_steps_of_the_same_worker_run_inline_until_one_must_wait() -> None:
    # Given a lifecycle at its first step, where the third step must wait 5 s
    world = World()
    world.records.create(make_record(PLAN))
    acquire, cordon, evict = Script([Outcome.next()]), Script([Outcome.next()]), Script([Outcome.wait(5)])
    engine = world.engine({Step.ACQUIRE_SLOT: acquire, Step.CORDON: cordon, Step.EVICT: evict})

    # When its message is handled
    handled = engine.handle(world.message())

    # Then three steps ran in one invocation, each committed, and one delayed message waits for the next run
    assert handled is Handled.RAN
    assert (len(acquire.runs), len(cordon.runs), len(evict.runs)) == (1, 1, 1)
    assert world.records.commits == 3
    (sent,) = world.queues.take()
    assert (sent.worker, sent.message.step, sent.message.seq, sent.delay) == (Worker.DRAIN, Step.EVICT, 3, 5)


def test_a_step_of_the_other_worker_is_handed_over_through_its_queue() -> None:
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT))
    engine = world.engine({Step.EVICT: Script([Outcome.next()])})
    engine.handle(world.message())
    (sent,) = world.queues.take()
    assert (sent.worker, sent.message.step, sent.delay) == (Worker.EIP, Step.RELEASE_EIP, 0)


def test_a_step_runs_inline_only_while_the_invocation_has_time_left() -> None:
    world = World()
    world.records.create(make_record(PLAN))
    cordon = Script([Outcome.next()])
    engine = world.engine({Step.ACQUIRE_SLOT: Script([Outcome.next()]), Step.CORDON: cordon})
    engine.handle(world.message(), time_left=lambda: 3.0)
    assert cordon.runs == []
    assert [s.message.step for s in world.queues.take()] == [Step.CORDON]


def test_a_duplicate_delivery_of_a_message_runs_its_step_once() -> None:
    # Given a message delivered twice
    world = World()
    world.records.create(make_record(PLAN))
    acquire = Script([Outcome.wait(5), Outcome.wait(5)])
    engine = world.engine({Step.ACQUIRE_SLOT: acquire})
    message = world.message()

    # When both deliveries are handled
    assert engine.handle(message) is Handled.RAN
    assert engine.handle(message) is Handled.WATCHING

    # Then the step ran once; the duplicate only sent a watch, which finds the chain healthy and ends
    assert len(acquire.runs) == 1
    first, watch = world.queues.take()
    world.clock.advance(first.delay)
    engine.handle(first.message)
    world.queues.take()
    world.clock.advance(watch.delay - first.delay)
    assert engine.handle(watch.message) is Handled.STALE
    assert world.queues.take() == []
    assert len(acquire.runs) == 2  # the second is the next poll of the chain, not the duplicate


def test_a_redelivery_several_steps_behind_still_repairs_a_lost_chain() -> None:
    # Given steps that ran inline (seq 0 -> 2), then a crash before the next message was sent
    world = World()
    world.records.create(make_record(PLAN))
    engine = world.engine(
        {Step.ACQUIRE_SLOT: Script([Outcome.next()]), Step.CORDON: Script([Outcome.wait(5)])}
    )
    old = world.message()
    engine.handle(old)
    world.queues.take()  # lost with the crash

    # When the first message comes again, then its watch
    assert engine.handle(old) is Handled.WATCHING
    (watch,) = world.queues.take()
    world.clock.advance(watch.delay)

    # Then the chain is repaired at the current step
    assert engine.handle(watch.message) is Handled.RESENT
    (sent,) = world.queues.take()
    assert (sent.message.step, sent.message.seq, sent.message.watch) == (Step.CORDON, 3, None)


def test_two_concurrent_deliveries_of_one_message_commit_once() -> None:
    # Given two invocations that both read the record at the same seq
    world = World()
    world.records.create(make_record(PLAN))
    slow_engine_record = world.record()

    class Racing:
        def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
            # the other delivery commits first, while this one is still working
            world.records.commit(slow_engine_record.model_copy(update={"seq": 1}), expected_seq=0)
            return Outcome.wait(5)

    engine = world.engine({Step.ACQUIRE_SLOT: Racing()})

    # When the slower one tries to commit
    handled = engine.handle(world.message())

    # Then it loses, and sends nothing
    assert handled is Handled.CONFLICT
    assert world.queues.take() == []


def test_a_message_lost_after_its_commit_is_sent_again_by_the_redelivery_of_the_one_before() -> None:
    # Given a step that committed and then crashed before sending the next message
    world = World()
    world.records.create(make_record(PLAN))
    engine = world.engine({Step.ACQUIRE_SLOT: Script([Outcome.wait(5)])})
    old = world.message()
    engine.handle(old)
    world.queues.take()  # the message the crash lost

    # When the old message is redelivered soon, it sends a watch that comes back when the step would be overdue
    world.clock.advance(10)
    assert engine.handle(old) is Handled.WATCHING
    (watch,) = world.queues.take()
    assert watch.message.watch == 1
    assert watch.delay == 5 - 10 + 180 + 1  # due 5 s after the commit, 180 s grace, checked 1 s after
    # ...and the step still not having run by then, the watch repairs the chain
    world.clock.advance(watch.delay)
    assert engine.handle(watch.message) is Handled.RESENT

    # Then the current step is sent again under a new seq (so a late original would be stale)
    (sent,) = world.queues.take()
    assert sent.message.seq == world.record().seq == 2
    assert world.record().resumes == 1
    assert world.metrics.counts["LifecyclesResumed"] == 1


def test_a_transient_failure_retries_the_step_with_growing_backoff() -> None:
    world = World()
    world.records.create(make_record(PLAN))
    failing = Script([TransientError("throttled"), TransientError("throttled"), Outcome.wait(5)])
    engine = world.engine({Step.ACQUIRE_SLOT: failing})
    delays = []
    for _ in range(2):
        engine.handle(world.message())
        (sent,) = world.queues.take()
        delays.append(sent.delay)
        world.clock.advance(sent.delay)
    assert world.record().attempts == 2
    assert world.record().last_error == "throttled"
    assert 1 <= delays[0] < delays[1] <= 4
    engine.handle(world.message())
    assert world.record().attempts == 0  # the step ran: the next transient error starts the backoff over


@pytest.mark.parametrize(("step", "longest"), [(Step.EVICT, 5), (Step.CORDON, 5), (Step.ACQUIRE_SLOT, 180)])
def test_a_drain_in_progress_retries_a_failing_step_within_seconds_however_often_it_failed(
    step: Step, longest: int
) -> None:
    # Given a step that has already failed six times in a row (an API server failing for a while)
    world = World()
    world.records.create(make_record(PLAN, step, attempts=6))
    engine = world.engine({step: Script([TransientError("HTTP 500")])})

    # When it fails again
    engine.handle(world.message())

    # Then a cordoned node's drain (its slot held, its timeout running) tries again within 5 s, as kubectl
    # drain does; a node still waiting for its slot backs off as before (2^6 s and more)
    (sent,) = world.queues.take()
    assert sent.delay <= longest
    assert sent.delay >= (1 if step is not Step.ACQUIRE_SLOT else 64)


@pytest.mark.parametrize(("retry_after", "waited"), [(30, 30), (600, 60)])
def test_a_step_the_server_asked_to_wait_is_retried_no_sooner_than_it_asked_up_to_a_minute(
    retry_after: float, waited: int
) -> None:
    # Given a step whose call the server throttled with a Retry-After, at its first failure (a backoff of 1 s)
    world = World()
    world.records.create(make_record(PLAN))
    engine = world.engine({Step.ACQUIRE_SLOT: Script([TransientError("HTTP 429", retry_after=retry_after)])})

    # When it fails, Then it is retried once the server's wait is over, a minute at most
    engine.handle(world.message())
    (sent,) = world.queues.take()
    assert sent.delay == waited


def test_an_unexpected_error_propagates_so_the_message_is_retried_and_dead_lettered() -> None:
    world = World()
    world.records.create(make_record(PLAN))
    engine = world.engine({Step.ACQUIRE_SLOT: Script([KeyError("bug")])})
    with pytest.raises(KeyError):
        engine.handle(world.message())
    assert world.record().seq == 0


def test_a_wait_that_would_outlive_the_heartbeat_timeout_records_a_heartbeat_first() -> None:
    # Given a step that waits 30 s, 230 s into a hook with a 300 s heartbeat timeout and a 60 s margin
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT))
    engine = world.engine({Step.EVICT: Script([Outcome.wait(30), Outcome.wait(30)])})
    world.clock.advance(200)
    engine.handle(world.message())
    assert world.autoscaling.heartbeats == []  # 200 + 30 < 300 - 60
    world.clock.advance(30)

    # When it runs again
    engine.handle(world.message())

    # Then it heartbeats, and the new deadline is a heartbeat timeout from now
    assert len(world.autoscaling.heartbeats) == 1
    record = world.record()
    assert record.heartbeat_deadline == world.clock.now() + timedelta(seconds=HEARTBEAT)
    assert record.heartbeats == 1


def test_a_completion_retried_after_throttling_keeps_the_action_alive_until_it_succeeds() -> None:
    # Given a lifecycle at its completion 200 s into a 300 s hook, whose completion has failed often (its
    # backoff is minutes long) and is throttled once more
    world = World()
    world.records.create(make_record(PLAN, Step.COMPLETE, attempts=7))
    complete = Script([TransientError("Rate exceeded")])
    engine = world.engine({Step.COMPLETE: complete})
    world.clock.advance(200)

    # When it runs
    engine.handle(world.message())

    # Then the retry comes while the action is still alive: a heartbeat now, or a retry early enough to
    # record one itself (it was due 3-4 minutes later, after the heartbeat timeout, and Auto Scaling applied
    # the hook's default result: a launch abandoned)
    record = world.record()
    assert record.step is Step.COMPLETE
    assert record.due_at <= record.heartbeat_deadline - timedelta(seconds=MARGIN)
    assert world.autoscaling.heartbeats


def test_a_heartbeat_comes_early_enough_that_a_crashed_step_retried_later_finds_the_action_alive() -> None:
    # Given a step that may come back 210 s late if its invocation dies (visibility timeout + grace)
    world = World(redelivery=210)
    world.records.create(make_record(PLAN, Step.EVICT))
    engine = world.engine({Step.EVICT: Script([Outcome.wait(5), Outcome.wait(5)])})

    # When it waits 5 s, 30 s into a 300 s hook: a late retry could come at 35 + 210, within a margin of 300
    world.clock.advance(30)
    engine.handle(world.message())

    # Then it records a heartbeat now, not only when the deadline is a minute away
    assert len(world.autoscaling.heartbeats) == 1


def test_a_wait_longer_than_the_heartbeat_timeout_is_cut_into_pieces_that_each_heartbeat() -> None:
    # Given a step that asks to wait 15 minutes in a hook whose heartbeat timeout is 5 minutes
    world = World()
    world.records.create(make_record(PLAN, Step.ACQUIRE_SLOT))
    engine = world.engine({Step.ACQUIRE_SLOT: Script([Outcome.wait(900), Outcome.wait(900)])})

    # When it runs, twice
    engine.handle(world.message())
    (first,) = world.queues.take()
    world.clock.advance(first.delay)
    engine.handle(world.message())
    (second,) = world.queues.take()

    # Then each run records a heartbeat, and each wait ends a margin before the new heartbeat deadline
    assert first.delay == second.delay == HEARTBEAT - MARGIN
    assert len(world.autoscaling.heartbeats) == 2
    assert world.record().heartbeat_deadline == world.clock.now() + timedelta(seconds=HEARTBEAT)


def test_a_hook_too_short_for_a_fault_still_polls_at_the_steps_pace_and_heartbeats_each_time() -> None:
    # Given a drain polling every second in a hook whose heartbeat timeout (300 s) is shorter than the margin
    # plus a fault's delay (60 + 270 s): no wait leaves room for a fault (intake warns about such a hook)
    world = World(redelivery=270)
    world.records.create(make_record(PLAN, Step.EVICT))
    engine = world.engine({Step.EVICT: Script([Outcome.wait(1), Outcome.wait(1)])})

    # When it runs, twice
    engine.handle(world.message())
    (first,) = world.queues.take()
    world.clock.advance(first.delay)
    engine.handle(world.message())
    (second,) = world.queues.take()

    # Then each next run comes when the step asked (a second later), never later: the wait is not stretched
    # to the heartbeat deadline; and each run renews the action, the most that can be done
    assert first.delay == second.delay == 1
    assert len(world.autoscaling.heartbeats) == 2


ONE_FAULT = 150  # the template's defaults: the work queues' visibility timeout (150 s) > resume grace + 2


class ThrottledAutoscaling(FakeAutoscaling):
    """Heartbeats fail as throttled until ``throttled`` of them have been refused."""

    def __init__(self, throttled: int) -> None:
        super().__init__()
        self.throttled = throttled
        self.refused = 0

    def heartbeat(self, action: ActionRef) -> bool:
        if self.refused < self.throttled:
            self.refused += 1
            raise TransientError("Throttling: Rate exceeded")
        return super().heartbeat(action)


def run_for(world: World, engine: StepEngine, seconds: float) -> list[LifecycleRecord]:
    """Deliver each message at its due time until ``seconds`` have passed; the records as each run left them."""
    end = world.clock.now() + timedelta(seconds=seconds)
    seen = []
    while (record := world.record()).due_at <= end and not record.finished:
        world.clock.current = max(world.clock.current, record.due_at)
        world.queues.take()
        engine.handle(world.message())
        seen.append(world.record())
    return seen


def test_a_waiter_heartbeats_only_as_often_as_the_deadline_needs_and_its_next_run_survives_a_fault() -> None:
    # Given a node waiting for a budget slot, retrying every 30 s, in a hook with a 300 s heartbeat timeout
    world = World(redelivery=ONE_FAULT)
    world.records.create(make_record(PLAN))
    engine = world.engine({Step.ACQUIRE_SLOT: lambda record, now: Outcome.wait(30)})

    # When it waits for an hour
    runs = run_for(world, engine, 3600)

    # Then every next run, even retried after a fault, still comes a margin before the heartbeat deadline...
    for record in runs:
        late = record.due_at + timedelta(seconds=ONE_FAULT + MARGIN)
        assert late <= record.heartbeat_deadline, f"{record.due_at} retried at {late}"
    # ...and it heartbeats once per 60 s window the deadline allows (300 - 60 - 150 - 30), not on each retry
    assert len(runs) == 121
    assert len(world.autoscaling.heartbeats) <= 61


def test_a_long_wait_is_cut_so_that_its_next_run_retried_after_a_fault_still_finds_the_action_alive() -> None:
    # Given a step that asks to wait 15 minutes in a hook whose heartbeat timeout is 5 minutes, and a next
    # run that may come 150 s late if its invocation dies
    world = World(redelivery=ONE_FAULT)
    world.records.create(make_record(PLAN, Step.ACQUIRE_SLOT))
    engine = world.engine({Step.ACQUIRE_SLOT: Script([Outcome.wait(900)])})

    # When it runs
    engine.handle(world.message())

    # Then it heartbeats, and its wait ends early enough that a retry 150 s late still heartbeats in time
    (sent,) = world.queues.take()
    assert len(world.autoscaling.heartbeats) == 1
    assert sent.delay == HEARTBEAT - MARGIN - ONE_FAULT


def test_a_throttled_heartbeat_is_asked_again_with_backoff_and_still_renews_the_action_in_time() -> None:
    # Given a long wait whose heartbeats are throttled six times in a row
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = ThrottledAutoscaling(throttled=6)
    world.records.create(make_record(PLAN, Step.ACQUIRE_SLOT))
    engine = world.engine({Step.ACQUIRE_SLOT: lambda record, now: Outcome.wait(900)})

    # When it runs until a heartbeat goes through
    delays = []
    while not world.autoscaling.heartbeats:
        engine.handle(world.message())
        (sent,) = world.queues.take()
        delays.append(sent.delay)
        world.clock.advance(sent.delay)

    # Then each retry waits half of what is left before the last run that could survive a fault (90 s in),
    # never less than 5 s; past it, half of what is left before the deadline's margin (240 s in)...
    assert delays[:6] == [45, 22, 12, 6, 5, 75]
    # ...and the heartbeat that went through came before the action's deadline
    assert world.autoscaling.refused == 6
    assert world.clock.now() - timedelta(seconds=delays[-1]) < T0 + timedelta(seconds=HEARTBEAT - MARGIN)
    assert world.metrics.counts["HeartbeatRetries"] == 6


def test_a_run_soon_after_a_heartbeat_does_not_heartbeat_again() -> None:
    # Given a waiter that just heartbeat, woken a few seconds later (a budget slot was freed)
    world = World(redelivery=ONE_FAULT)
    world.records.create(make_record(PLAN))
    engine = world.engine({Step.ACQUIRE_SLOT: lambda record, now: Outcome.wait(30)})
    world.clock.advance(100)
    engine.handle(world.message())
    assert len(world.autoscaling.heartbeats) == 1
    world.clock.advance(5)

    # When the woken run waits again
    record = world.record()
    engine.handle(WorkMessage(record_id=record.id, seq=record.seq, step=record.step, wake=True))

    # Then the deadline renewed 5 s ago still covers the next run and its retry: no second heartbeat
    assert len(world.autoscaling.heartbeats) == 1


def test_a_successful_poll_resets_the_retry_count_after_transient_errors() -> None:
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT, attempts=5, resumes=3))
    engine = world.engine({Step.EVICT: Script([Outcome.wait(5)])})
    engine.handle(world.message())
    assert (world.record().attempts, world.record().resumes) == (0, 0)


def test_no_heartbeat_is_recorded_beyond_the_global_timeout() -> None:
    world = World()
    deadline = T0 + timedelta(seconds=600)
    world.records.create(make_record(PLAN, Step.EVICT, global_deadline=deadline, heartbeat_deadline=deadline))
    engine = world.engine({Step.EVICT: Script([Outcome.wait(30)])})
    world.clock.advance(400)
    engine.handle(world.message())
    assert world.autoscaling.heartbeats == []


def test_an_action_that_is_no_longer_active_skips_to_the_cleanup() -> None:
    # Given an action that timed out while the drain was waiting
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT))
    world.autoscaling.active = False
    cleanup = Script([Outcome.next()])
    engine = world.engine({Step.EVICT: Script([Outcome.wait(30)]), Step.CLEANUP: cleanup})
    world.clock.advance(250)

    # When the heartbeat finds no active action
    engine.handle(world.message())

    # Then the lifecycle goes on with its cleanup, without completing anything
    record = world.record()
    assert record.outcome == "action-expired"
    assert len(cleanup.runs) == 1
    assert record.finished
    assert world.autoscaling.completed == []


def test_before_its_first_disruptive_step_an_action_is_confirmed_with_auto_scaling() -> None:
    # Given a new terminate lifecycle, not yet confirmed
    world = World()
    world.records.create(make_record(PLAN, verified_at=None))
    acquire = Script([Outcome.wait(30)])
    engine = world.engine({Step.ACQUIRE_SLOT: acquire})

    # When its first step runs
    engine.handle(world.message())

    # Then a heartbeat with its token confirmed the action first (and renewed it), then the step ran
    record = world.record()
    assert world.autoscaling.heartbeats == [record.action]
    assert (record.verified_at, record.heartbeats) == (T0, 1)
    assert len(acquire.runs) == 1


def test_a_message_naming_an_action_auto_scaling_does_not_have_disrupts_nothing() -> None:
    # Given a lifecycle recorded from a forged or replayed message: Auto Scaling has no such active action
    world = World()
    world.records.create(make_record(PLAN, verified_at=None))
    world.autoscaling.active = False
    acquire, cleanup = Script([Outcome.next()]), Script([Outcome.next()])
    engine = world.engine({Step.ACQUIRE_SLOT: acquire, Step.CLEANUP: cleanup})

    # When its first step comes
    engine.handle(world.message())

    # Then no step that disrupts anything runs, nothing is completed, and the lifecycle ends as unknown
    assert acquire.runs == []
    record = world.record()
    assert (record.outcome, record.finished, record.completed_at) == ("unknown-action", True, None)
    assert world.autoscaling.completed == []
    assert world.metrics.counts["LifecycleActionsUnknown"] == 1


def test_a_launch_message_auto_scaling_does_not_confirm_gives_no_address() -> None:
    # Given a launch lifecycle recorded from a forged or replayed message, for a running instance: an address
    # associated now would replace its public IP under its connections
    world = World()
    launch = (Step.ASSIGN_EIP, Step.COMPLETE, Step.DONE)
    world.records.create(make_record(launch, verified_at=None))
    world.autoscaling.active = False
    assign = Script([Outcome.next()])

    # When its first step comes
    world.engine(
        {Step.ASSIGN_EIP: assign, Step.COMPLETE: Script([Outcome.next()])}, worker=Worker.EIP
    ).handle(world.message())

    # Then no address is assigned and the lifecycle ends as unknown
    assert assign.runs == []
    assert (world.record().outcome, world.record().finished) == ("unknown-action", True)


def test_a_launch_with_neither_address_nor_gate_needs_no_confirmation_but_its_completion() -> None:
    # (a launch with the readiness gate is confirmed before it: tests/unit/drain/test_readiness_gate.py)
    world = World()
    launch = (Step.COMPLETE, Step.DONE)
    world.records.create(make_record(launch, verified_at=None))
    complete = Script([Outcome.wait(5)])
    world.engine({Step.COMPLETE: complete}).handle(world.message())
    assert world.autoscaling.heartbeats == []
    assert len(complete.runs) == 1


def test_near_the_global_timeout_the_action_is_completed_whatever_it_waits_for() -> None:
    # Given a lifecycle still waiting for its slot a minute before the global timeout (kept alive till then)
    world = World()
    record = make_record(PLAN)
    now = record.global_deadline - timedelta(seconds=MARGIN)
    world.records.create(kept_alive(world.autoscaling, record, now - timedelta(seconds=100)))
    waiting = Script([Outcome.wait(30)])
    engine = world.engine(
        {
            Step.ACQUIRE_SLOT: waiting,
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: Script([Outcome.next()]),
        }
    )
    world.clock.current = now

    # When its step runs
    engine.handle(world.message())

    # Then the waiting step does not run; the action is completed with the failure result
    assert waiting.runs == []
    ((_, result),) = world.autoscaling.completed
    assert result is ActionResult.ABANDON
    assert world.record().outcome == "global-timeout-near"
    assert world.metrics.counts["GlobalTimeoutsNear"] == 1


def test_an_action_the_guard_completes_before_its_release_has_its_address_taken_back_right_after() -> None:
    # Given a drain still polling at the guard's point, its plan releasing the instance's address after it:
    # the guard keeps only the completion's margin and one fault's retry, no room for a release first
    world = World()
    record = make_record(PLAN, Step.EVICT, node="n1")
    now = record.global_deadline - timedelta(seconds=MARGIN)
    world.records.create(kept_alive(world.autoscaling, record, now - timedelta(seconds=100)))
    world.clock.current = now
    drain = world.engine(
        {
            Step.EVICT: Script([Outcome.wait(5)]),
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: Script([Outcome.next()]),
        }
    )
    release = Script([Outcome.next()])
    eip = world.engine({Step.RELEASE_EIP: release}, worker=Worker.EIP)

    # When the guard's run completes the action, and the message it sends is handled
    drain.handle(world.message())
    ((_, result),) = world.autoscaling.completed
    (sent,) = world.queues.take()
    eip.handle(sent.message)

    # Then the address is taken back after the completion, not skipped (an instance going back to its warm
    # pool would keep it, out of the sweeper's reach), and the cleanup follows
    assert result is ActionResult.ABANDON
    assert (sent.worker, sent.message.step) == (Worker.EIP, Step.RELEASE_EIP)
    assert len(release.runs) == 1
    assert world.record().step is Step.CLEANUP


def test_one_crash_at_the_guards_run_still_leaves_time_to_complete_the_action() -> None:
    # Given a drain polling near its global timeout, with the engine's one-fault timing: the later of a
    # visibility timeout and the resume grace (3 minutes here) + 2 s
    fault = 182
    world = World(redelivery=fault)
    record = make_record(PLAN, Step.EVICT, node="n1")
    end = record.global_deadline
    world.clock.current = end - timedelta(seconds=MARGIN + fault + 100)
    world.records.create(kept_alive(world.autoscaling, record, world.clock.now()))
    complete = CompleteAction(world.autoscaling, world.metrics)
    crashes = [RuntimeError("the invocation died (a timeout, out of memory)")]

    def crashing_complete(record: LifecycleRecord, now: datetime) -> Outcome:
        if crashes:
            raise crashes.pop()
        return complete(record, now)

    engine = world.engine(
        {
            Step.EVICT: Script([Outcome.wait(900)] * 10),
            Step.COMPLETE: crashing_complete,
            Step.CLEANUP: Script([Outcome.next()]),
        }
    )
    # its polls, each brought forward as the heartbeats and the guard need, until the guard's run goes to the
    # completion and its invocation dies (one fault)
    engine.handle(world.message())
    while crashes:
        (sent,) = world.queues.take()
        world.clock.current = max(world.clock.now(), world.record().due_at)
        try:
            engine.handle(sent.message)
        except RuntimeError:
            break

    # When SQS delivers the message again a visibility timeout later: older than the record now (the guard
    # committed the completion step before the crash), it sends a watch, which sends the step again once the
    # resume grace has passed; each message is delivered when its delay is over
    crashed_at = world.clock.now()
    world.clock.current = crashed_at + timedelta(seconds=fault)
    engine.handle(sent.message)
    while not world.autoscaling.completed and (pending := world.queues.take()):
        (sent,) = pending
        world.clock.current += timedelta(seconds=sent.delay)
        engine.handle(sent.message)

    # Then the action was still alive and is completed, at most one fault after the guard's run and before
    # its global timeout
    ((action, _),) = world.autoscaling.completed
    assert action == record.action
    assert world.clock.now() - crashed_at <= timedelta(seconds=fault)
    assert world.clock.now() < end


def test_a_wait_never_runs_past_the_point_where_the_guard_must_complete() -> None:
    world = World()
    record = make_record(PLAN, Step.EVICT)
    now = record.global_deadline - timedelta(seconds=MARGIN + 100)
    world.records.create(kept_alive(world.autoscaling, record, now - timedelta(seconds=100)))
    engine = world.engine({Step.EVICT: Script([Outcome.wait(900)])})
    world.clock.current = now
    engine.handle(world.message())
    (sent,) = world.queues.take()
    assert sent.delay == 100


def test_a_message_that_arrives_before_its_time_is_put_back_for_the_rest_of_the_wait() -> None:
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT, due_at=T0 + timedelta(seconds=1500)))
    evict = Script([])
    engine = world.engine({Step.EVICT: evict})
    assert engine.handle(world.message()) is Handled.SNOOZED
    (sent,) = world.queues.take()
    assert sent.delay == 900  # SQS's longest delay; the rest is chained
    assert evict.runs == []


def test_a_wake_message_runs_a_waiting_step_before_its_due_time() -> None:
    # Given a lifecycle waiting 30 s for a budget slot
    world = World()
    world.records.create(make_record(PLAN))
    acquire = Script([Outcome.wait(30, slot_waiting_since=T0), Outcome.next()])
    engine = world.engine({Step.ACQUIRE_SLOT: acquire, Step.CORDON: Script([Outcome.wait(5)])})
    engine.handle(world.message())
    world.queues.take()

    # When a freed slot wakes it a second later
    world.clock.advance(1)
    record = world.record()
    wake = WorkMessage(record_id=record.id, seq=record.seq, step=record.step, wake=True)

    # Then the step runs at once (an ordinary message that early would be put back until its time)
    assert engine.handle(wake) is Handled.RAN
    assert len(acquire.runs) == 2
    assert world.record().step is Step.CORDON


def test_a_drain_paused_for_its_lost_slot_is_woken_when_a_slot_frees() -> None:
    # Given a drain that lost its budget slot and waits 30 s to ask for it back (it heads the queue: it is
    # disruption in progress), and a waiter that has not started
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT, drain_paused_at=T0))
    world.records.create(
        make_record(
            PLAN,
            id="i-0fedcba9876543210/terminate/token",
            instance_id="i-0fedcba9876543210",
            slot_waiting_since=T0,
        )
    )
    dispatcher = Dispatcher(
        records=world.records, queues=world.queues, clock=world.clock, metrics=world.metrics
    )

    # When a freed slot wakes each of them
    dispatcher.wake("i-0123456789abcdef0/terminate/token")
    dispatcher.wake("i-0fedcba9876543210/terminate/token")

    # Then both are sent a wake at once: the paused drain is not left idle until its retry
    sent = world.queues.take()
    assert [(s.message.step, s.message.wake, s.delay) for s in sent] == [
        (Step.EVICT, True, 0),
        (Step.ACQUIRE_SLOT, True, 0),
    ]
    # and the wake runs the paused step before its due time
    world.clock.advance(1)
    evict = Script([Outcome.wait(5)])
    engine = world.engine({Step.EVICT: evict})
    assert engine.handle(sent[0].message) is Handled.RAN
    assert len(evict.runs) == 1


def test_a_wake_overtaken_by_the_waiters_own_retry_still_runs() -> None:
    # Given a lifecycle waiting for a slot, woken at its seq...
    world = World()
    world.records.create(make_record(PLAN))
    waits = [Outcome.wait(30, slot_waiting_since=T0), Outcome.wait(30, slot_waiting_since=T0)]
    acquire = Script([*waits, Outcome.next()])
    engine = world.engine({Step.ACQUIRE_SLOT: acquire, Step.CORDON: Script([Outcome.wait(5)])})
    engine.handle(world.message())
    world.clock.advance(30)
    record = world.record()
    wake = WorkMessage(record_id=record.id, seq=record.seq, step=record.step, wake=True)
    # ...and its own retry, which read the budget before the slot was freed, committing first (seq moves on)
    engine.handle(world.message())
    world.queues.take()

    # When the wake arrives under the older seq
    handled = engine.handle(wake)

    # Then it still runs the waiting step at once and takes the slot: not dropped for the retry 30 s later
    assert handled is Handled.RAN
    assert len(acquire.runs) == 3
    assert world.record().step is Step.CORDON


def test_a_woken_step_that_lost_its_commit_to_the_waiters_retry_wakes_it_again() -> None:
    # Given a lifecycle waiting for a slot, woken at its seq
    world = World()
    world.records.create(make_record(PLAN, slot_waiting_since=T0))

    def concurrent_retry_commits_first(record: LifecycleRecord, now: datetime) -> Outcome:
        # while the woken run takes the slot, the waiter's own retry (denied: it read the budget before the
        # release) commits "wait again" under the same seq
        waited = record.model_copy(update={"seq": record.seq + 1, "due_at": now + timedelta(seconds=30)})
        assert world.records.commit(waited, expected_seq=record.seq)
        return Outcome.next()  # the slot is ours in the budget document

    engine = world.engine({Step.ACQUIRE_SLOT: concurrent_retry_commits_first})
    record = world.record()
    wake = WorkMessage(record_id=record.id, seq=record.seq, step=record.step, wake=True)

    # When the woken run loses its commit
    handled = engine.handle(wake)

    # Then the lifecycle, holding a slot it does not know of, is woken again at once under its new seq
    assert handled is Handled.CONFLICT
    sent = world.queues.take()
    assert [(s.message.seq, s.message.wake, s.delay) for s in sent] == [(world.record().seq, True, 0)]


def test_completion_settles_the_action_once_and_is_harmless_when_repeated() -> None:
    world = World()
    world.records.create(make_record((Step.COMPLETE, Step.DONE)))
    complete = CompleteAction(world.autoscaling, world.metrics)
    engine = world.engine({Step.COMPLETE: complete})
    assert engine.handle(world.message()) is Handled.DONE
    record = world.record()
    assert record.result is ActionResult.CONTINUE
    assert record.completed_at == T0
    assert record.finished_at == T0
    assert len(world.autoscaling.completed) == 1
    # A second delivery whose record missed the first commit (still at COMPLETE): Auto Scaling has no active
    # action any more. That is success, not an error, and the record says the action was settled elsewhere
    again = complete(make_record((Step.COMPLETE, Step.DONE)), T0)
    assert again.changes["outcome"] == "completed"
    assert again.changes["extra"][SETTLED_ELSEWHERE] is True
    assert len(world.autoscaling.completed) == 1
    # and the dashboard counts the one completion Auto Scaling took, once, not the repeat that found it settled
    # (two deliveries at once, or an action that timed out with the hook's default result, are no completion
    # of nodecycle's with this result), which its completer counts once its commit lands (a run on the record as the
    # second delivery read it)
    missed = World(autoscaling=world.autoscaling, metrics=world.metrics)
    missed.records.create(make_record((Step.COMPLETE, Step.DONE)))
    assert missed.engine({Step.COMPLETE: complete}).handle(missed.message()) is Handled.DONE
    assert len(world.autoscaling.completed) == 1
    assert world.metrics.counts["LifecycleActionsCompleted"] == 1
    assert len(world.metrics.timings["LifecycleDuration"]) == 1
    assert world.metrics.counts["LifecycleActionsSettledElsewhere"] == 1


def test_a_known_token_under_another_hook_disrupts_nothing() -> None:
    # Given Auto Scaling's action of the instance under its launch hook, and a message that names its token
    # and instance under the terminate hook (Auto Scaling names an action by its group and hook too)
    world = World()
    launch = make_record(PLAN, hook="launch")
    assert world.autoscaling.heartbeat(launch.action)  # the action is known under its own hook
    world.records.create(make_record(PLAN, verified_at=None))
    acquire = Script([Outcome.next()])
    engine = world.engine({Step.ACQUIRE_SLOT: acquire, Step.CLEANUP: Script([Outcome.next()])})

    # When its first step comes, Then nothing is disrupted and the lifecycle ends as unknown
    engine.handle(world.message())
    assert acquire.runs == []
    assert world.record().outcome == "unknown-action"


def test_a_known_token_with_another_instance_disrupts_nothing() -> None:
    # Given Auto Scaling's action for instance i-0aaaaaaaaaaaaaaaa, and a message that names its token with
    # another instance (replayed and edited, or forged from a leaked token)
    world = World()
    world.autoscaling.issue("token", "i-0aaaaaaaaaaaaaaaa")
    world.records.create(make_record(PLAN, verified_at=None))
    acquire, cleanup = Script([Outcome.next()]), Script([Outcome.next()])
    engine = world.engine({Step.ACQUIRE_SLOT: acquire, Step.CLEANUP: cleanup})

    # When its first step comes, Then nothing is disrupted and the lifecycle ends as unknown
    engine.handle(world.message())
    assert acquire.runs == []
    assert world.record().outcome == "unknown-action"


def test_unknown_and_finished_records_drop_their_messages() -> None:
    world = World()
    engine = world.engine({})
    unknown = WorkMessage(record_id="i-0123456789abcdef0/terminate/nope", seq=0, step=Step.EVICT)
    assert engine.handle(unknown) is Handled.UNKNOWN
    world.records.create(make_record(PLAN, Step.DONE))
    assert engine.handle(world.message()) is Handled.FINISHED


def test_a_step_that_must_run_again_goes_back_through_the_queue_even_when_its_wait_is_already_over() -> None:
    # Given a waiter retrying every 2 s whose attempt takes 3 s (a slow API server), in an invocation with a
    # minute left
    world = World()
    world.records.create(make_record(PLAN))
    runs: list[datetime] = []

    def acquire(record: LifecycleRecord, now: datetime) -> Outcome:
        runs.append(now)
        world.clock.advance(3)
        return Outcome.wait(2)

    engine = world.engine({Step.ACQUIRE_SLOT: acquire})
    started = world.clock.now()

    # When its message is handled
    handled = engine.handle(world.message(), time_left=lambda: 60 - (world.clock.now() - started).seconds)

    # Then it ran once, and its next attempt waits in the queue behind the others' work (seen under load:
    # four waiters looping inline held every drain invocation, and a drain in progress went unpolled 54 s)
    assert handled is Handled.RAN
    assert len(runs) == 1
    (sent,) = world.queues.take()
    assert (sent.message.step, sent.message.seq, sent.delay) == (Step.ACQUIRE_SLOT, 1, 0)


def test_a_step_that_took_long_heartbeats_by_the_time_it_ended_not_the_time_it_began() -> None:
    # Given a step that begins 200 s into a hook with a 300 s heartbeat timeout and a 60 s margin (no
    # heartbeat needed yet: 200 < 300 - 60), and takes 50 s (a slow API, throttled calls retried)
    world = World()
    world.records.create(make_record(PLAN, Step.EVICT))
    world.clock.advance(200)

    def slow(record: LifecycleRecord, now: datetime) -> Outcome:
        world.clock.advance(50)
        return Outcome.next()

    engine = world.engine({Step.EVICT: slow})

    # When it ends, 250 s in, handing the next step to the other worker's queue
    engine.handle(world.message())

    # Then it heartbeats before it commits: the next step, queued, may come too late to do it (seen under
    # load: a launch whose address took 7 s to verify expired while its readiness gate waited in the queue)
    assert world.record().step is Step.RELEASE_EIP
    assert len(world.autoscaling.heartbeats) == 1
    assert world.record().heartbeat_deadline == world.clock.now() + timedelta(seconds=HEARTBEAT)


def test_a_waiter_of_a_hook_shorter_than_the_margin_heartbeats_twice_a_timeout_not_every_second() -> None:
    # Given a hook of Auto Scaling's shortest heartbeat timeout, 30 s, under the margin (intake warns about
    # it): no run can leave a margin before the deadline, but nothing calls for a run every second either
    world = World()
    world.autoscaling.action_timeout = 30
    world.records.create(
        make_record(
            PLAN,
            Step.ACQUIRE_SLOT,
            heartbeat_timeout=30,
            heartbeat_deadline=T0 + timedelta(seconds=30),
            global_deadline=global_deadline(T0, 30),
        )
    )
    runs = []

    def waiting(record: LifecycleRecord, now: datetime) -> Outcome:
        runs.append(now)
        return Outcome.wait(30)  # no budget slot yet: ask again in BudgetRetrySeconds

    engine = world.engine({Step.ACQUIRE_SLOT: waiting})

    # When it waits for a slot for two minutes
    while world.clock.now() < T0 + timedelta(seconds=120):
        world.clock.current = max(world.clock.current, world.record().due_at)
        engine.handle(world.message())

    # Then it ran and heartbeated half way to each heartbeat deadline (about 8 times), not 120 times, and the
    # action never expired
    assert 6 <= len(runs) <= 10
    assert len(world.autoscaling.heartbeats) <= len(runs)
    assert world.record().step is Step.ACQUIRE_SLOT


def test_a_completion_throttled_past_the_settle_point_backs_off_yet_is_retried_before_the_global_timeout() -> (
    None
):
    # Given a completion two minutes before the global timeout (the guard's point passed), throttled for the
    # fifth time in a row (Auto Scaling's API under a storm of heartbeats and completions)
    world = World(redelivery=150)
    record = make_record(PLAN, Step.COMPLETE, attempts=4)
    now = record.global_deadline - timedelta(seconds=120)
    world.records.create(kept_alive(world.autoscaling, record, now - timedelta(seconds=10)))
    engine = world.engine({Step.COMPLETE: Script([TransientError("Throttling: Rate exceeded")])})
    world.clock.current = now

    # When it fails again
    engine.handle(world.message())

    # Then it is asked again after its backoff (16-24 s), not at once, and still a margin before the timeout
    (sent,) = world.queues.take()
    assert 16 <= sent.delay <= 120 - MARGIN


def test_a_lifecycle_done_with_a_successor_starts_it_on_the_same_record() -> None:
    # Given a maintenance lifecycle at its cleanup, with the lifecycle of a later maintenance of the instance
    # told of while it waited (one record per instance and cause): due a lead before its own start
    world, later = _waiting_with_a_successor(Step.CLEANUP)
    first = world.record()
    engine = world.engine({Step.CLEANUP: Script([Outcome.next()])})

    # When its cleanup is done
    handled = engine.handle(world.message(first.id))

    # Then the record is the later maintenance's lifecycle, at its first step on the next seq, and its message
    # waits for its due time (SQS's longest delay at a time)
    record = world.record()
    assert handled is Handled.RAN
    assert (record.step, record.seq, record.token, record.global_deadline) == (
        Step.ACQUIRE_SLOT,
        1,
        "second",
        later,
    )
    assert not record.finished
    assert SUCCESSOR not in record.extra
    (sent,) = world.queues.take()
    assert (sent.message.step, sent.message.seq, sent.delay) == (Step.ACQUIRE_SLOT, 1, 900)


MAINTENANCE_PLAN = (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.CLEANUP, Step.DONE)
RID = "i-0123456789abcdef0/scheduled-change"
STARTED_OVER: dict[str, Any] = {
    "id": RID,
    "transition": Transition.SCHEDULED_CHANGE,
    "hook": "",
    "heartbeat_timeout": 0,
    "verified_at": None,
}


def _waiting_with_a_successor(step: Step = Step.ACQUIRE_SLOT) -> tuple[World, Any]:
    """The first maintenance's lifecycle at ``step`` (waiting for a slot), a later one's queued as its
    successor."""
    later = T0 + timedelta(days=10)
    successor = make_record(
        MAINTENANCE_PLAN,
        **STARTED_OVER,
        token="second",
        due_at=later - timedelta(hours=1),
        heartbeat_deadline=later,
        global_deadline=later,
    )
    first = make_record(
        MAINTENANCE_PLAN,
        step,
        **STARTED_OVER,
        token="first",
        slot_waiting_since=T0,  # it asked, and waits
        heartbeat_deadline=T0 + timedelta(hours=1),
        global_deadline=T0 + timedelta(hours=1),
        extra={SUCCESSOR: successor.model_dump(mode="json")},
    )
    world = World()
    world.records.create(first)
    return world, later


def _run_to_its_successor(world: World) -> tuple[Script, StepEngine]:
    """The first lifecycle's message handled: it takes its slot and runs through its (empty) drain to DONE,
    its successor started; the ACQUIRE_SLOT step (which would run the successor's too) and the engine."""
    acquire = Script([Outcome.next(), Outcome.next()])
    steps: dict[Step, object] = {Step.ACQUIRE_SLOT: acquire}
    for step in (Step.CORDON, Step.EVICT, Step.CLEANUP):
        steps[step] = Script([Outcome.next(), Outcome.next()])
    engine = world.engine(steps)
    engine.handle(world.message(RID))
    return acquire, engine


def test_a_late_wake_of_the_first_lifecycle_does_not_run_its_successor_before_its_due_time() -> None:
    # Given the first maintenance's lifecycle waiting at ACQUIRE_SLOT (seq 0); a releaser woke it (a message
    # with wake=True, seq 0), but its own retry (seq 0) ran first, got the slot and, the node being empty,
    # ran inline through its drain to DONE: the successor now waits at ACQUIRE_SLOT for its due time, 10 days on
    world, later = _waiting_with_a_successor()
    wake = WorkMessage(record_id=RID, seq=0, step=Step.ACQUIRE_SLOT, wake=True, token="first")
    acquire, engine = _run_to_its_successor(world)
    record = world.record()
    assert (record.token, record.step, record.due_at) == (
        "second",
        Step.ACQUIRE_SLOT,
        later - timedelta(hours=1),
    )
    world.queues.take()
    runs_before = len(acquire.runs)

    # When the releaser's wake-up (meant for the first lifecycle) arrives a little later
    world.clock.advance(30)
    engine.handle(wake)

    # Then the successor must not run now: it is due 10 days from now
    record = world.record()
    assert len(acquire.runs) == runs_before, "the successor's ACQUIRE_SLOT ran 10 days before its due time"
    assert (record.token, record.step) == ("second", Step.ACQUIRE_SLOT)


def test_the_engines_own_wake_after_a_lost_commit_does_not_run_the_successor_before_its_due_time() -> None:
    # Given two deliveries of the first lifecycle's ACQUIRE_SLOT at once (a wake next to its own retry): the one
    # runs the whole (short) lifecycle while the other is in its step; the other's commit then loses
    world, _ = _waiting_with_a_successor()
    engine_holder: dict[str, Any] = {}

    def racing_acquire(record: Any, now: Any) -> Outcome:
        if not engine_holder.get("raced"):
            engine_holder["raced"] = True
            engine_holder["engine"].handle(WorkMessage(record_id=RID, seq=0, step=Step.ACQUIRE_SLOT))
        return Outcome.next()

    calls: list[str] = []

    def acquire(record: Any, now: Any) -> Outcome:
        calls.append(record.token)
        return racing_acquire(record, now)

    steps: dict[Step, object] = {
        Step.ACQUIRE_SLOT: acquire,
        Step.CORDON: lambda r, n: Outcome.next(),
        Step.EVICT: lambda r, n: Outcome.next(),
        Step.CLEANUP: lambda r, n: Outcome.next(),
    }
    engine = world.engine(steps)
    engine_holder["engine"] = engine
    engine.handle(WorkMessage(record_id=RID, seq=0, step=Step.ACQUIRE_SLOT, wake=True))
    record = world.record()
    assert (record.token, record.step) == ("second", Step.ACQUIRE_SLOT)
    assert calls == ["first", "first"]

    # When the messages the engine sent are delivered
    for sent in world.queues.take():
        engine.handle(sent.message)

    # Then the successor's ACQUIRE_SLOT has not run: it is due in 10 days
    assert calls == ["first", "first"], f"ACQUIRE_SLOT ran for {calls[2:]} 10 days early"


def test_a_releasers_wake_called_after_the_first_lifecycle_finished_does_not_run_the_successor() -> None:
    # Given the first maintenance's lifecycle waiting for a slot, a later one's queued as its successor;
    # a release made it eligible (its record id is in the releaser's wake list), and before the releaser
    # calls Dispatcher.wake for it (other waiters woken first, a slow SQS send), its own retry took the
    # slot and, the node being empty, ran through to DONE: the successor now waits 10 days at ACQUIRE_SLOT
    world, later = _waiting_with_a_successor()
    acquire, engine = _run_to_its_successor(world)
    record = world.record()
    assert (record.token, record.step, record.slot_waiting_since) == ("second", Step.ACQUIRE_SLOT, None)
    world.queues.take()
    runs_before = len(acquire.runs)

    # When the releaser now wakes the waiter of its list, and the wake-up is handled
    waker = Dispatcher(records=world.records, queues=world.queues, clock=world.clock, metrics=world.metrics)
    waker.wake(RID)
    for sent in world.queues.take():
        engine.handle(sent.message)

    # Then the successor did not run 10 days before its due time
    assert len(acquire.runs) == runs_before, "the successor's ACQUIRE_SLOT ran 10 days early"
    assert world.record().due_at == later - timedelta(hours=1)
