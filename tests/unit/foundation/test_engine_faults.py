"""The step engine under faults between its writes and Auto Scaling's ambiguous answers: a completion that
landed but whose answer was lost, a heartbeat throttled again and again, a refused completion."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.engine import MAX_REFUSED_ATTEMPTS, Handled, Outcome, StepEngine
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step, global_deadline
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import T0, FakeAutoscaling
from tests.unit.foundation.test_engine import (
    HEARTBEAT,
    MARGIN,
    ONE_FAULT,
    PLAN,
    Script,
    World,
    kept_alive,
    make_record,
)


class AnswerLost(FakeAutoscaling):
    """Completions land, but the first ``lost`` answers never come back (a read timeout, a 5xx of a load
    balancer in front of the service that had passed the call on): the caller sees a transient error."""

    def __init__(self, lost: int) -> None:
        super().__init__()
        self.lost = lost

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        landed = super().complete(action, result)
        if self.lost:
            self.lost -= 1
            raise TransientError("Read timeout on endpoint URL: autoscaling")
        return landed


def next_step(record: LifecycleRecord, now: datetime) -> Outcome:
    return Outcome.next()


def test_a_completion_that_landed_but_whose_answer_was_lost_is_recorded_as_completed_not_expired() -> None:
    # Given a terminating lifecycle at its completion, 100 s into a 300 s hook, on the template's timing (a
    # fault's retry may come 150 s late: the heartbeat is due at every run), whose completion lands but whose
    # answer is lost
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = AnswerLost(lost=1)
    world.records.create(make_record(PLAN, Step.COMPLETE))
    engine = world.engine(
        {Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics), Step.CLEANUP: next_step}
    )
    world.clock.advance(100)

    # When it runs, and then each message it sends, at its time
    handled = engine.handle(world.message())
    while not world.record().finished:
        (sent,) = world.queues.take()
        world.clock.advance(sent.delay)
        handled = engine.handle(sent.message)

    # Then the action was completed once, and the record says so with the result it was completed with: Auto
    # Scaling's "no active lifecycle action" to the heartbeat after the lost answer is the completion that
    # landed, not an action that expired (the cleanup would tell the node's events the action was gone)
    assert handled is Handled.DONE
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.CONTINUE]
    record = world.record()
    assert (record.outcome, record.result) == ("completed", ActionResult.CONTINUE)
    assert record.completed_at is not None
    assert record.extra.get(SETTLED_ELSEWHERE) is True
    assert "LifecycleActionsExpired" not in world.metrics.counts


class Throttled(FakeAutoscaling):
    """Every heartbeat is throttled (Auto Scaling's API under a storm of heartbeats and completions)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def heartbeat(self, action: ActionRef) -> bool:
        self.asked += 1
        raise TransientError("Throttling: Rate exceeded")


def test_a_run_whose_confirming_heartbeat_was_throttled_does_not_ask_the_throttled_api_again() -> None:
    # Given a drain whose record's heartbeat deadline has passed (its last heartbeat landed, but the run that
    # recorded it died before its commit: the action is alive a while more), so that its next poll confirms
    # the action first; Auto Scaling throttles every heartbeat
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = Throttled()
    record = make_record(PLAN, Step.EVICT)
    world.records.create(record)
    world.autoscaling.kept_alive(record.token, record.heartbeat_deadline - timedelta(seconds=30))
    evict = Script([Outcome.wait(5)])
    engine = world.engine({Step.EVICT: evict})
    world.clock.current = record.heartbeat_deadline + timedelta(seconds=10)

    # When the poll runs
    engine.handle(world.message())

    # Then its heartbeat was asked once: the throttled confirmation is retried at the step's backoff (the poll
    # does not run unconfirmed), not asked again at once to keep the action alive
    assert world.autoscaling.asked == 1
    assert evict.runs == []
    (sent,) = world.queues.take()
    assert sent.message.step is Step.EVICT
    assert sent.delay >= 1


def test_a_step_that_runs_past_the_guards_point_has_its_action_completed_at_its_end_not_a_run_later() -> None:
    # Given a waiter for a budget slot, on the template's timing (the guard completes an action 210 s before
    # its global timeout: the completion's margin and one fault's retry), whose run starts 5 s before the
    # guard's point and takes 10 s (a throttled, retried ConfigMap read), then asks to wait two minutes more
    world = World(redelivery=ONE_FAULT)
    record = make_record(PLAN, Step.ACQUIRE_SLOT)
    settle_point = record.global_deadline - timedelta(seconds=MARGIN + ONE_FAULT)
    start = settle_point - timedelta(seconds=5)
    world.records.create(kept_alive(world.autoscaling, record, start - timedelta(seconds=60)))
    world.clock.current = start

    def slow_wait(record: LifecycleRecord, now: datetime) -> Outcome:
        world.clock.advance(10)
        return Outcome.wait(120)

    engine = world.engine(
        {
            Step.ACQUIRE_SLOT: slow_wait,
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: next_step,
        }
    )

    # When it runs
    engine.handle(world.message())

    # Then the action is completed as the guard would (its failure result) as the step ends, past the guard's
    # point: not at a next run up to a margin before the global timeout, which one fault would push past it
    # (the hook's default result then)
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.ABANDON]
    assert world.record().outcome == "global-timeout-near"


def test_a_run_whose_confirmation_renewed_the_action_does_not_heartbeat_it_again() -> None:
    # Given the first disruptive step of a lifecycle under a hook whose heartbeat timeout (120 s) is shorter
    # than the margin plus a fault's retry (every run of it heartbeats), on the template's timing
    world = World(redelivery=ONE_FAULT)
    world.autoscaling.action_timeout = 120
    world.records.create(
        make_record(
            PLAN,
            verified_at=None,
            heartbeat_timeout=120,
            heartbeat_deadline=T0 + timedelta(seconds=120),
            global_deadline=global_deadline(T0, 120),
        )
    )
    engine = world.engine({Step.ACQUIRE_SLOT: Script([Outcome.wait(5)])})

    # When it runs (its confirmation is a heartbeat)
    engine.handle(world.message())

    # Then the action was renewed once: the confirmation's heartbeat is the one this run needed, and a second
    # one a moment later extends nothing
    assert len(world.autoscaling.heartbeats) == 1
    record = world.record()
    assert record.heartbeat_deadline == T0 + timedelta(seconds=120)
    (sent,) = world.queues.take()
    assert sent.delay == 5


def test_a_drain_polling_every_few_seconds_asks_a_throttled_heartbeat_again_only_at_its_backoff() -> None:
    # Given a drain polling its pods every 5 s on the template's timing (from 90 s after its last heartbeat a
    # fault's retry could come too late: every poll wants to heartbeat), while Auto Scaling throttles every
    # heartbeat
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = Throttled()
    world.records.create(make_record(PLAN, Step.EVICT))
    engine = world.engine({Step.EVICT: lambda record, now: Outcome.wait(5)})

    # When it polls until a margin before the heartbeat deadline (150 s of polls past that point: 30 of them)
    polls = 0
    while world.clock.now() < T0 + timedelta(seconds=HEARTBEAT - MARGIN):
        engine.handle(world.message())
        (sent,) = world.queues.take()
        world.clock.advance(max(sent.delay, 1))
        polls += 1

    # Then the throttled heartbeat was asked again at its own backoff (half of what is left each time, at
    # least 5 s apart), not at every poll: a storm of throttled calls is not fed by every drain in progress
    assert polls >= 40
    assert world.autoscaling.asked <= 8
    assert world.metrics.counts["HeartbeatRetries"] == world.autoscaling.asked


class CompletionRefused(FakeAutoscaling):
    """CompleteLifecycleAction is denied to the role (a service control policy rolled out); heartbeats are not."""

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        raise AccessRefused("completing a lifecycle action", "AccessDenied", "not authorized")


def refused_to_its_last_try(world: World, engine: StepEngine) -> WorkMessage:
    """The message of a lifecycle at its completion, run at each retry while Auto Scaling refuses it to the role,
    until it fails (``MAX_REFUSED_ATTEMPTS``): the message that failed."""
    for _ in range(MAX_REFUSED_ATTEMPTS - 1):
        engine.handle(world.message())
        (sent,) = world.queues.take()
        world.clock.advance(sent.delay)
    failing = world.message()
    with pytest.raises(AccessRefused):
        engine.handle(failing)
    return failing


def test_a_refused_completion_completes_nothing_is_retried_then_fails_its_message_for_the_dead_letter_queue() -> (
    None
):
    # Given a lifecycle at its completion, which Auto Scaling refuses to the role every time
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = CompletionRefused()
    world.records.create(make_record(PLAN, Step.COMPLETE))
    engine = world.engine({Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)})

    # When it runs, then at each retry, until its message fails
    refused_to_its_last_try(world, engine)

    # Then nothing was completed nor taken for settled (a refusal is no "no active lifecycle action"), the
    # action was kept alive meanwhile, and the record still waits at its completion (for the redelivery, the
    # sweeper), its refusals told, every try among its attempts (the last one too: see the engine's withdrawal)
    assert world.autoscaling.completed == []
    record = world.record()
    assert (record.step, record.completed_at, record.attempts) == (
        Step.COMPLETE,
        None,
        MAX_REFUSED_ATTEMPTS,
    )
    assert "refused (AccessDenied)" in (record.last_error or "")
    assert world.metrics.counts["StepRetries[reason=refused]"] == MAX_REFUSED_ATTEMPTS
    assert world.clock.now() < world.autoscaling.expires_at(record.token)


class Overtaken(FakeAutoscaling):
    """Runs ``meanwhile`` (another delivery of the same message, in another container) while the first call to
    CompleteLifecycleAction is on its way."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: list[Callable[[], object]] = []

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        if self.meanwhile:
            self.meanwhile.pop()()
        return super().complete(action, result)


def test_two_deliveries_of_a_completion_at_once_complete_it_once_and_the_record_once() -> None:
    # Given a completion whose message is delivered twice at once
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = Overtaken()
    world.records.create(make_record(PLAN, Step.COMPLETE, result=ActionResult.ABANDON))
    cleanup = Script([Outcome.next(), Outcome.next()])
    engine = world.engine(
        {Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics), Step.CLEANUP: cleanup}
    )
    message = world.message()
    second: list[Handled] = []
    world.autoscaling.meanwhile.append(lambda: second.append(engine.handle(message)))

    # When the first is overtaken by the second while it calls Auto Scaling
    first = engine.handle(message)

    # Then the action was completed once, with its result; the second, behind the first's claim of the
    # completion (see engine.claimed_for_completion), called nothing and only watches the first's chain
    assert (second, first) == ([Handled.WATCHING], Handled.DONE)
    assert world.autoscaling.completed == [(world.record().action, ActionResult.ABANDON)]
    record = world.record()
    assert (record.result, record.completed_at) == (ActionResult.ABANDON, T0)
    assert SETTLED_ELSEWHERE not in record.extra
    assert len(cleanup.runs) == 1


def test_a_lifecycle_whose_action_auto_scaling_does_not_have_holds_no_open_action_while_it_cleans_up() -> (
    None
):
    # Given a terminate lifecycle from a stale or forged message (Auto Scaling has no such action), whose cleanup
    # then fails for a while (the API server down)
    world = World(redelivery=ONE_FAULT)
    world.autoscaling.active = False
    world.records.create(make_record(PLAN, verified_at=None))
    cleanup = Script([TransientError("the API server is unavailable")])
    engine = world.engine({Step.ACQUIRE_SLOT: Script([]), Step.CLEANUP: cleanup})

    # When its first step finds no such action, and its cleanup fails
    engine.handle(world.message())

    # Then, while it retries its cleanup, it holds no open action: the sweeper does not heartbeat, settle or
    # take it for an expired one, and does not count the instance's action as known, which would keep it from
    # keeping alive or adopting the instance's true action under the hook (whose event was lost) meanwhile
    record = world.record()
    assert (record.step, record.outcome) == (Step.CLEANUP, "unknown-action")
    assert len(cleanup.runs) == 1
    assert not record.action_open
