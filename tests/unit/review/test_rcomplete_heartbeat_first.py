"""The heartbeat a completion asks before its call (``CompleteAction._still_its_own``: a completion into the warm pool, or
a launch's that may have been called before) at the last sweep that can settle the action before its global timeout.
The sweep settles there whatever kept the action's heartbeat from Auto Scaling (throttled, or that call alone denied):
no later sweep comes before the hook's default result, and a completion needs no heartbeat. The completion's own
heartbeat must not undo that: throttled, it must not keep the completion from its call."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import WARM_POOL, ActionRef, Step, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.foundation.test_engine import MARGIN, World, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, Repair, stalled_at_its_last_chance

INSTANCE = "i-0123456789abcdef0"

# The actions whose completion asks its token first at the sweep's settlement: a drain of a scale-in back to the
# warm pool (held in Warmed:Pending:Wait by the terminating hook), and a launch out of the pool at its completion
# whose earlier try was throttled (its call may have landed: attempts > refusals)
ASKED_FIRST: dict[str, tuple[str, dict[str, Any]]] = {
    "scale-in-to-the-pool": (
        "Warmed:Pending:Wait",
        {"origin": "AutoScalingGroup", "destination": WARM_POOL},
    ),
    "launch-retried": (
        "Pending:Wait",
        {
            "transition": Transition.LAUNCHING,
            "hook": "launch",
            "origin": WARM_POOL,
            "destination": "AutoScalingGroup",
            "step": Step.COMPLETE,
            "result": ActionResult.CONTINUE,
            "attempts": 1,
        },
    ),
}


@pytest.mark.parametrize("case", sorted(ASKED_FIRST))
def test_the_last_sweep_completes_an_action_whose_completion_heartbeat_is_throttled(case: str) -> None:
    # Given a stalled lifecycle whose completion asks its token first, at the last sweep before its global timeout,
    # and Auto Scaling throttling heartbeats (botocore's retries spent) but taking completions
    held_in, changes = ASKED_FIRST[case]
    repair = Repair()
    hook = "launch" if changes.get("transition") is Transition.LAUNCHING else "terminate"
    repair.autoscaling.issue("token", INSTANCE, hook=("nodes", hook), held_in=held_in)
    stalled_at_its_last_chance(repair, **changes)
    repair.clock.advance(
        30
    )  # (the next sweep, on schedule, would come less than a margin before the global timeout)

    def throttled(action: ActionRef) -> bool:
        raise TransientError("recording a lifecycle heartbeat: Throttling: Rate exceeded")

    repair.autoscaling.heartbeat = throttled  # type: ignore[method-assign]

    # When the sweep runs (no later one comes before the global timeout), Then the action is completed all the same,
    # not left to the hook's default result
    assert repair.run()["LifecyclesSettled"] == 1
    assert [named.instance_id for named, _ in repair.autoscaling.completed] == [INSTANCE], (
        "the completion's throttled heartbeat kept the last sweep from completing the action"
    )
    (settled,) = repair.records.items.values()
    assert not settled.action_open
    assert not settled.extra.get(SETTLED_ELSEWHERE)


def test_a_settlement_whose_heartbeat_first_failed_is_not_taken_over_as_a_completion_that_may_have_landed() -> (
    None
):
    # Given a drain of a scale-in back to the warm pool, stalled at a sweep before its global timeout that is not the
    # last one (a settle point set earlier by the engine's redelivery, a work visibility timeout of 420 s: the next
    # sweep, even late in its minute, comes a margin before the global timeout), whose settlement's heartbeat before
    # its call is throttled (its completion never called)
    repair = Repair(settle_before=INTERVAL + 3 * timedelta(seconds=60))
    held_in, changes = ASKED_FIRST["scale-in-to-the-pool"]
    repair.autoscaling.issue("token", INSTANCE, hook=("nodes", "terminate"), held_in=held_in)
    stalled_at_its_last_chance(repair, **changes)
    repair.clock.advance(-90)
    heartbeat = repair.autoscaling.heartbeat
    throttles = [TransientError("recording a lifecycle heartbeat: Throttling: Rate exceeded")]

    def throttled_once(action: ActionRef) -> bool:
        if throttles:
            raise throttles.pop()
        return heartbeat(action)

    repair.autoscaling.heartbeat = throttled_once  # type: ignore[method-assign]
    with pytest.raises(SweepFailed):  # (its alarm)
        repair.run()
    assert repair.autoscaling.completed == []
    (record,) = repair.records.items.values()

    # When an operator completes the action meanwhile, and the engine runs the completion the sweep sent on
    repair.autoscaling.completed.append((record.action, ActionResult.CONTINUE))
    (sent, *_) = repair.queues.take()
    repair.engine().handle(sent.message)

    # Then the action is recorded as settled elsewhere (counted: its alarm), not as a completion of the sweep's that
    # vanished: the sweep never called
    (settled,) = repair.records.items.values()
    assert not settled.action_open
    assert settled.extra.get(SETTLED_ELSEWHERE), (
        "a claim whose completion was never called was taken over as one that may have landed"
    )
    assert repair.metrics.counts["LifecycleActionsSettledElsewhere"] == 1


@pytest.mark.parametrize(("before_the_timeout", "completed"), [(MARGIN / 2, ["token"]), (MARGIN * 2, [])])
def test_the_engines_completion_past_its_last_margin_completes_though_its_heartbeat_first_is_throttled(
    before_the_timeout: float, completed: list[str]
) -> None:
    # Given a launch out of the warm pool at its completion, an earlier try throttled (its call may have landed), now
    # within a margin of its global timeout (where the engine's retries come at once: no later run is sure to come
    # before it), and Auto Scaling throttling heartbeats (botocore's retries spent) but taking completions
    world = World()
    world.autoscaling.issue("token", INSTANCE, hook=("nodes", "launch"), held_in="Pending:Wait")
    _, changes = ASKED_FIRST["launch-retried"]
    record = make_record((Step.COMPLETE, Step.DONE), id=f"{INSTANCE}/launch/token", **changes)
    world.clock.current = record.global_deadline - timedelta(seconds=before_the_timeout)
    world.records.create(kept_alive(world.autoscaling, record, world.clock.now() - timedelta(seconds=100)))

    def throttled(action: ActionRef) -> bool:
        raise TransientError("recording a lifecycle heartbeat: Throttling: Rate exceeded")

    world.autoscaling.heartbeat = throttled  # type: ignore[method-assign]
    engine = world.engine({Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)})

    # When the engine runs its completion
    engine.handle(world.message(record.id))

    # Then the action is completed, not retried on a heartbeat until the hook's default result ends it (before its
    # last margin, retried: the heartbeat still guards a retry against the instance's next action)
    assert [named.token for named, _ in world.autoscaling.completed] == completed, (
        "the completion's throttled heartbeat kept the engine's last try from completing the action"
    )
