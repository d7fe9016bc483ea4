"""The step engine tells a refusal (AccessDenied to the role) from throttling: the refused tries that fail a
message are counted apart from the throttled ones, and a refused heartbeat is told and counted as a refusal."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.engine import MAX_REFUSED_ATTEMPTS, Handled, Outcome
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import T0, FakeAutoscaling
from tests.unit.foundation.test_engine import ONE_FAULT, PLAN, World, make_record


class Answers(FakeAutoscaling):
    """CompleteLifecycleAction answers each call with the next of ``faults`` (an exception raised), then as
    Auto Scaling does."""

    def __init__(self, faults: Sequence[Exception]) -> None:
        super().__init__()
        self.faults = list(faults)

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        if self.faults:
            raise self.faults.pop(0)
        return super().complete(action, result)


def throttled() -> TransientError:
    return TransientError("completing a lifecycle action: Throttling: Rate exceeded")


def refused() -> AccessRefused:
    return AccessRefused("completing a lifecycle action", "AccessDenied", "not authorized")


def run_until_sent_or_failed(world: World, engine_steps: dict[Step, object], runs: int) -> list[Handled]:
    """Handle the record's message ``runs`` times, each at its time."""
    engine = world.engine(engine_steps)
    handled = []
    for _ in range(runs):
        handled.append(engine.handle(world.message()))
        (sent,) = world.queues.take()
        world.clock.advance(sent.delay)
    return handled


def test_a_refusal_after_a_throttling_storm_is_retried_not_taken_for_the_last_of_eight_refusals() -> None:
    # Given a completion that Auto Scaling throttles 7 times in a row (a storm of heartbeats and completions),
    # then refuses once (an SCP rolled out and back), then accepts
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = Answers([throttled() for _ in range(MAX_REFUSED_ATTEMPTS - 1)] + [refused()])
    world.autoscaling.action_timeout = 3600  # (the storm's backoff is minutes: the hook's timeout is longer)
    world.records.create(make_record(PLAN, Step.COMPLETE, heartbeat_timeout=3600))
    steps: dict[Step, object] = {
        Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
        Step.CLEANUP: lambda record, now: Outcome.next(),
    }

    # When it runs through the throttles and the refusal, then once more
    handled = run_until_sent_or_failed(world, steps, MAX_REFUSED_ATTEMPTS)
    last = world.engine(steps).handle(world.message())

    # Then the one refusal was retried as a first refusal is, not counted as the eighth refused try (which
    # fails the message): the action was completed at the retry after it
    assert handled == [Handled.RAN] * MAX_REFUSED_ATTEMPTS
    assert last is Handled.DONE
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.CONTINUE]
    assert world.metrics.counts["StepRetries[reason=refused]"] == 1


def test_refusals_between_throttles_still_fail_the_message_after_eight_refused_tries() -> None:
    # Given a completion refused every other try and throttled in between (a denial that stays, under load)
    world = World(redelivery=ONE_FAULT)
    faults: list[Exception] = []
    for _ in range(MAX_REFUSED_ATTEMPTS):
        faults += [refused(), throttled()]
    world.autoscaling = Answers(faults)
    world.autoscaling.action_timeout = 3600
    world.records.create(make_record(PLAN, Step.COMPLETE, heartbeat_timeout=3600))
    steps: dict[Step, object] = {Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}

    # When it runs until the eighth refusal
    run_until_sent_or_failed(world, steps, 2 * (MAX_REFUSED_ATTEMPTS - 1))
    with pytest.raises(AccessRefused):
        world.engine(steps).handle(world.message())

    # Then the message failed at the eighth refused try (the throttles in between do not start the count over:
    # a denial that stays reaches the dead-letter queue and its alarm), nothing completed
    assert world.autoscaling.completed == []
    record: LifecycleRecord = world.record()
    assert record.step is Step.COMPLETE
    assert world.metrics.counts["StepRetries[reason=refused]"] == MAX_REFUSED_ATTEMPTS


class HeartbeatsRefused(FakeAutoscaling):
    """RecordLifecycleActionHeartbeat is denied to the role (a policy edited, an SCP rolled out); the rest is not."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def heartbeat(self, action: ActionRef) -> bool:
        self.asked += 1
        raise AccessRefused("recording a lifecycle heartbeat", "AccessDenied", "explicit deny in an SCP")


def test_a_refused_keep_alive_heartbeat_is_told_and_counted_as_a_refusal_not_as_throttling(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a drain polling its pods every 5 s on the template's timing (every poll from 90 s after its last
    # heartbeat wants to heartbeat), while Auto Scaling refuses every heartbeat to the role
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = HeartbeatsRefused()
    world.records.create(make_record(PLAN, Step.EVICT))
    engine = world.engine({Step.EVICT: lambda record, now: Outcome.wait(5)})

    # When it polls for the first 150 s
    for _ in range(30):
        engine.handle(world.message())
        (sent,) = world.queues.take()
        world.clock.advance(max(sent.delay, 1))

    # Then each refused heartbeat was counted as a refusal (its own series, as a refused step's), told as an
    # error naming the call and the code, and asked again only at the heartbeat's backoff, as a throttled one
    assert 1 <= world.autoscaling.asked <= 8
    assert world.metrics.counts["HeartbeatRetries[reason=refused]"] == world.autoscaling.asked
    refused = [r for r in caplog.records if "refused (AccessDenied)" in r.getMessage()]
    assert len(refused) == world.autoscaling.asked
    assert {r.levelname for r in refused} == {"ERROR"}


class LandsThenRefused(FakeAutoscaling):
    """The first CompleteLifecycleAction lands but its answer is lost (a read timeout); the next is refused to
    the role (an SCP rolled out meanwhile); later ones are answered as Auto Scaling does."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        self.calls += 1
        if self.calls == 1:
            super().complete(action, result)
            raise TransientError("Read timeout on endpoint URL: autoscaling")
        if self.calls == 2:
            raise refused()
        return super().complete(action, result)


def test_a_refused_completion_after_one_that_may_have_landed_is_not_taken_for_an_expired_action() -> None:
    # Given a lifecycle at its completion on the template's timing (every run heartbeats), whose first call
    # lands unanswered and whose retry is refused
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = LandsThenRefused()
    world.records.create(make_record(PLAN, Step.COMPLETE, result=ActionResult.ABANDON))
    engine = world.engine(
        {
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: lambda record, now: Outcome.next(),
        }
    )
    world.clock.advance(100)

    # When it runs, then each message it sends, at its time
    engine.handle(world.message())
    while not world.record().finished:
        (sent,) = world.queues.take()
        world.clock.advance(sent.delay)
        engine.handle(sent.message)

    # Then Auto Scaling's "no active lifecycle action" to the heartbeat after the refusal is not taken for an
    # expiry (the first call may have landed, as it did): the completion's retry settles it, with its result
    record = world.record()
    assert (record.outcome, record.result) == ("completed", ActionResult.ABANDON)
    assert record.extra.get(SETTLED_ELSEWHERE) is True
    assert "LifecycleActionsExpired" not in world.metrics.counts
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.ABANDON]


class RefusedFor(FakeAutoscaling):
    """Heartbeats refused to the role during ``[start, stop)`` (an SCP rolled out and back), as Auto Scaling
    refuses them; answered as it answers them otherwise."""

    def __init__(self, start: datetime, stop: datetime) -> None:
        super().__init__()
        self.window = (start, stop)

    def heartbeat(self, action: ActionRef) -> bool:
        if self.window[0] <= self.clock.now() < self.window[1]:
            raise refused_heartbeat()
        return super().heartbeat(action)


def refused_heartbeat() -> AccessRefused:
    return AccessRefused("recording a lifecycle heartbeat", "AccessDenied", "explicit deny in an SCP")


@pytest.mark.parametrize("start", range(0, 600, 20))
def test_a_minute_of_refused_heartbeats_never_lets_a_polling_drains_action_lapse_on_the_templates_timing(
    start: int,
) -> None:
    # Given a drain polling every 5 s under a 300 s hook on the template's timing (a heartbeat is asked from
    # 210 s before the deadline, retried at half of what is left), and every heartbeat refused for a minute
    # starting ``start`` seconds in
    world = World(redelivery=ONE_FAULT)
    world.autoscaling = RefusedFor(T0 + timedelta(seconds=start), T0 + timedelta(seconds=start + 60))
    world.autoscaling.clock = world.clock
    world.records.create(make_record(PLAN, Step.EVICT))
    engine = world.engine({Step.EVICT: lambda record, now: Outcome.wait(5)})

    # When it polls for 15 minutes (three heartbeat timeouts)
    while world.clock.now() < T0 + timedelta(minutes=15):
        engine.handle(world.message())
        (sent,) = world.queues.take()
        world.clock.advance(max(sent.delay, 1))
        assert world.clock.now() < world.autoscaling.expires_at("token"), "the action lapsed"

    # Then the action never lapsed: the engine's own heartbeats, retried after the refusal, kept it alive
    # (on the template's timing a minute's denial ends no action of a drain in progress; the sweeper's
    # heartbeats come on top of these)
    assert world.record().outcome is None
