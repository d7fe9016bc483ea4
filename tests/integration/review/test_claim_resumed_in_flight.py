"""A completion claimed and in flight is not re-sent as a lost step, on the real record store (DynamoDB on moto).

Every completer claims the record before CompleteLifecycleAction (engine.claimed_for_completion), and the sweeper's
settlement leaves a claim younger than the heartbeat margin to its completer. But a claim moves the record to a new
seq due at once, and the paths that re-send a lost step judge it by the resume grace alone: the watch of an older
message (a duplicate delivery) and the sweeper's resume. The template lets the grace be shorter than the margin
(ResumeGraceSeconds from 1 s, HeartbeatMarginSeconds from 5 s, each on its own): re-sent while its completer's call
is still on its way, the step claimed over it and called a second time, and the first completer, told "no active
lifecycle action", counted the action settled elsewhere (its false alarm)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.engine import EngineTiming, Handled, Outcome, StepEngine
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeAutoscaling
from tests.support.stack import Stack
from tests.unit.foundation.test_engine import Script, World, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import Killed, Repair

GRACE = timedelta(seconds=10)  # ResumeGraceSeconds, shorter than the margin (as the template allows)
MARGIN = timedelta(seconds=60)  # HeartbeatMarginSeconds (its default)
SLOW = 15.0  # seconds the first completer's call takes (throttled, retried): within a drain invocation's 60 s
RECORD_ID = "i-0123456789abcdef0/terminate/token"
PLAN = (Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE)


class InFlight(FakeAutoscaling):
    """Auto Scaling, and what runs once while the first completion it is asked is still on its way (before it
    lands); every call counted."""

    def __init__(self) -> None:
        super().__init__()
        self.before_landing: list[Callable[[], object]] = []
        self.calls = 0

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        self.calls += 1
        if self.before_landing:
            self.before_landing.pop()()
        return super().complete(action, result)


def world_on(stack: Stack, margin: timedelta = MARGIN) -> tuple[World, InFlight, StepEngine]:
    world = World(records=DynamoRecordStore(stack.table, ttl=timedelta(days=1)))  # type: ignore[arg-type]
    world.autoscaling = autoscaling = InFlight()
    autoscaling.clock = world.clock
    record = make_record(PLAN, Step.COMPLETE, node="n1", seq=4, heartbeat_timeout=600)
    assert world.records.create(kept_alive(autoscaling, record, record.started_at))
    return world_on_records(world, autoscaling, margin=margin)


def world_on_records(
    world: World, autoscaling: InFlight, grace: timedelta = GRACE, margin: timedelta = MARGIN
) -> tuple[World, InFlight, StepEngine]:
    engine = StepEngine(
        worker=Worker.DRAIN,
        steps={
            Step.COMPLETE: CompleteAction(autoscaling, world.metrics, world.records),
            Step.EVICT: Script([Outcome.wait(5)] * 3),
            Step.CLEANUP: Script([Outcome.wait(5)] * 3),
        },
        records=world.records,
        queues=world.queues,
        autoscaling=autoscaling,
        clock=world.clock,
        metrics=world.metrics,
        timing=EngineTiming(
            resume_grace=grace,
            heartbeat_margin=margin,
            redelivery=grace + timedelta(seconds=2),
            settle_before=timedelta(minutes=5) + 2 * margin,  # (as the settings: interval + 2 margins)
        ),
        failure_result=lambda record: ActionResult.ABANDON,
    )
    return world, autoscaling, engine


def completed_once(world: World, autoscaling: InFlight) -> None:
    moved = world.records.get(RECORD_ID)
    assert moved is not None
    assert (moved.step, moved.result, moved.completed_at is not None) == (
        Step.CLEANUP,
        ActionResult.CONTINUE,
        True,
    )
    assert SETTLED_ELSEWHERE not in moved.extra
    assert autoscaling.calls == 1
    assert world.metrics.counts.get("LifecycleActionsSettledElsewhere", 0) == 0


@pytest.mark.usefixtures("stack")
def test_a_duplicate_message_watching_a_completion_in_flight_does_not_resend_it(stack: Stack) -> None:
    # Given a drain at its completion, whose CompleteLifecycleAction takes 15 s (throttled, retried), and a
    # duplicate of its message (SQS delivers at least once) that comes while that call is on its way
    world, autoscaling, engine = world_on(stack)
    message = world.message()
    handled: list[Handled] = []

    def meanwhile() -> None:
        world.clock.advance(SLOW)
        handled.append(engine.handle(message))  # (the claim's seq: it watches)
        # what comes back while the call is on its way: the watch (due at once, the claim past the grace) and
        # what it sends at once; not what comes later (the call lands first)
        later = []
        while sent := world.queues.take():
            for one in sent:
                if one.delay > 0:
                    later.append(one)
                else:
                    handled.append(engine.handle(one.message))
        for one in later:
            world.queues.send(one.worker, one.message, delay_seconds=one.delay)

    autoscaling.before_landing.append(meanwhile)

    # When the first delivery's call lands, and it commits
    first = engine.handle(message)

    # Then the action was completed once, and nothing counts it settled elsewhere: the watch left the claim to
    # its completer (before: re-sent past the 10 s grace, the step claimed over it and its call landed first; the
    # first call was told "no active lifecycle action": 2 calls, LifecycleActionsSettledElsewhere counted)
    completed_once(world, autoscaling)
    assert first is Handled.RAN
    assert Handled.RESENT not in handled


@pytest.mark.usefixtures("stack")
def test_a_completion_whose_call_outlasts_a_short_margin_is_not_taken_over_while_its_invocation_runs(
    stack: Stack,
) -> None:
    # Given a drain at its completion under the shortest margin the template allows (5 s), whose
    # CompleteLifecycleAction takes 15 s of its invocation's 60 s (throttled, retried), and a duplicate of its
    # message that comes while that call is on its way
    world, autoscaling, engine = world_on(stack, margin=timedelta(seconds=5))
    message = world.message()
    handled: list[Handled] = []

    def meanwhile() -> None:
        world.clock.advance(SLOW)
        handled.append(engine.handle(message))  # (the claim's seq: it watches)
        while sent := [one for one in world.queues.take() if one.delay == 0]:  # (what comes at once)
            handled.extend(engine.handle(one.message) for one in sent)

    autoscaling.before_landing.append(meanwhile)

    # When the first delivery's call lands, and it commits
    first = engine.handle(message, time_left=lambda: 60.0)

    # Then its claim was held while its invocation lasts, not a margin: completed once, nothing settled
    # elsewhere (before: the watch re-sent the step 5 s after the claim, claimed over it and called first)
    completed_once(world, autoscaling)
    assert first is Handled.RAN
    assert Handled.RESENT not in handled


@pytest.mark.usefixtures("stack")
def test_a_sweep_during_a_completion_in_flight_does_not_resend_it(stack: Stack) -> None:
    # Given a drain at its completion, whose CompleteLifecycleAction takes 15 s, and a sweep that runs
    # meanwhile (its step 15 s overdue by the record, past the 10 s grace)
    world, autoscaling, engine = world_on(stack)
    repair = Repair(
        clock=world.clock,
        records=world.records,
        queues=world.queues,
        autoscaling=autoscaling,
        metrics=world.metrics,
        grace=GRACE,
    )
    resumed: list[int] = []

    def meanwhile() -> None:
        world.clock.advance(SLOW)
        resumed.append(repair.run()["LifecyclesResumed"])
        for sent in world.queues.take():  # (what a resume sent: run at once)
            world.clock.advance(sent.delay)
            engine.handle(sent.message)

    autoscaling.before_landing.append(meanwhile)

    # When the drain's call lands, and it commits
    engine.handle(world.message())

    # Then the sweep left the claim to its completer, and the action was completed once (before: resumed, the
    # re-sent step claimed over it and called, and the first call was told "no active lifecycle action")
    assert resumed == [0]
    completed_once(world, autoscaling)


@pytest.mark.usefixtures("stack")
def test_a_settlement_whose_call_outlasts_the_margin_is_not_taken_over_while_its_sweep_runs(
    stack: Stack,
) -> None:
    # Given a stalled drain at its last chance, the defaults' grace and margin (60 s each), and a sweep whose
    # settlement's CompleteLifecycleAction takes 70 s (Auto Scaling throttled: botocore's five attempts, their
    # backoff and read timeouts, within the sweeper's 300 s), while the drain's poll message (the seq before the
    # claim) comes
    world = World(records=DynamoRecordStore(stack.table, ttl=timedelta(days=1)))  # type: ignore[arg-type]
    world.autoscaling = autoscaling = InFlight()
    autoscaling.clock = world.clock
    autoscaling.action_timeout = 600
    record = make_record(PLAN, Step.EVICT, node="n1", seq=4, heartbeat_timeout=600)
    world.clock.current = record.global_deadline - timedelta(minutes=5) - MARGIN
    assert world.records.create(kept_alive(autoscaling, record, world.clock.now() - timedelta(seconds=100)))
    _, _, engine = world_on_records(world, autoscaling, grace=MARGIN)
    repair = Repair(
        clock=world.clock,
        records=world.records,
        queues=world.queues,
        autoscaling=autoscaling,
        metrics=world.metrics,
        grace=MARGIN,
    )
    poll = world.message()
    handled: list[Handled] = []

    def meanwhile() -> None:
        world.clock.advance(70)
        handled.append(engine.handle(poll))  # (the claim's seq: it watches)
        later = []
        while sent := world.queues.take():
            for one in sent:
                if one.delay > 0:
                    later.append(one)
                else:
                    handled.append(engine.handle(one.message))
        for one in later:
            world.queues.send(one.worker, one.message, delay_seconds=one.delay)

    autoscaling.before_landing.append(meanwhile)

    # When the sweep settles it
    counts = repair.run()

    # Then the action was completed once, by the sweep, and nothing counts it settled elsewhere: the claim is held
    # while the sweep's invocation lasts (before: the watch re-sent the claimed step a margin after the claim, the
    # drain function claimed over it and its call landed first; the sweep's call, told "no active lifecycle
    # action", counted it settled elsewhere)
    assert autoscaling.calls == 1
    assert world.metrics.counts.get("LifecycleActionsSettledElsewhere", 0) == 0
    assert counts["LifecyclesSettled"] == 1
    assert Handled.RESENT not in handled


@pytest.mark.usefixtures("stack")
def test_a_drain_killed_between_its_claim_and_its_call_is_completed_by_its_redelivery_without_a_sweep(
    stack: Stack,
) -> None:
    # Given a drain at its completion whose invocation the runtime ends at its CompleteLifecycleAction (its
    # claim written, Auto Scaling not reached), and no sweep for as long as it takes (the schedule disabled)
    world, autoscaling, engine = world_on(stack)
    message = world.message()

    def killed() -> None:
        raise Killed

    autoscaling.before_landing.append(killed)
    with pytest.raises(Killed):
        engine.handle(message)

    # When its message comes again after the queue's visibility timeout (150 s), and each message it leads to
    # at its time
    world.clock.advance(150)
    handled = [engine.handle(message)]
    for _ in range(10):
        sent = world.queues.take()
        if not sent or handled[-1] is Handled.RAN:
            break
        world.clock.advance(sent[0].delay)
        handled.append(engine.handle(sent[0].message))

    # Then its redelivery took the claim over and completed the action once (the killed call never landed),
    # recorded as completed with its result
    assert handled == [Handled.WATCHING, Handled.RESENT, Handled.RAN]
    assert autoscaling.calls == 2
    assert len(autoscaling.completed) == 1
    moved = world.records.get(RECORD_ID)
    assert moved is not None
    assert (moved.step, moved.outcome, moved.completed_at is not None) == (Step.CLEANUP, "completed", True)
    assert world.metrics.counts.get("LifecycleActionsSettledElsewhere", 0) == 0
