"""A completion names the instance alone (group, hook, InstanceId: see ``AutoscalingActions.complete``), so it settles
whatever action the hook holds for the instance *now*. A lifecycle whose own action ended without it knowing (its
call landed and its answer was lost, an operator completed it, it timed out) must not complete the instance's next
action under the same hook: a launch into a running warm pool is drawn out of it at once (``Pending:Wait`` under the
launch hook again, a new token), and a scale-in back to the pool, or the pool's shrinking, holds the instance under the
terminating hook again. Completed by the stale lifecycle, the new action skips its own lifecycle's steps (the address,
the readiness gate, the drain)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.engine import Outcome, StepEngine
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import WARM_POOL, ActionRef, LifecycleRecord, Step, Transition
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeAutoscaling
from tests.unit.foundation.test_engine import PLAN, Script, World, make_record
from tests.unit.sweeper.test_sweeper import Repair, stalled_at_its_last_chance

INSTANCE = "i-0123456789abcdef0"


@dataclass
class ThrottledOnce(FakeAutoscaling):
    """Auto Scaling that fails the first completion with a throttle; ``landed``: after taking it (its answer lost)."""

    landed: bool = False
    failures: int = 1

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        if self.failures:
            self.failures -= 1
            if self.landed:
                super().complete(action, result)
            raise TransientError("Rate exceeded")
        return super().complete(action, result)


def ended_unknown(autoscaling: FakeAutoscaling, action: ActionRef, how: str) -> None:
    """``action`` ended without its lifecycle knowing: its own throttled call landed (``ThrottledOnce``), or an
    operator completed it."""
    if how == "by-hand":
        autoscaling.completed.append((action, ActionResult.CONTINUE))


def next_action(autoscaling: FakeAutoscaling, hook: str, held_in: str) -> ActionRef:
    """The instance's next action under the same hook, issued now."""
    autoscaling.issue("next", INSTANCE, at=autoscaling.clock.now(), hook=("nodes", hook), held_in=held_in)
    return ActionRef(
        instance_id=INSTANCE,
        transition=Transition.LAUNCHING if hook == "launch" else Transition.TERMINATING,
        token="next",
        group="nodes",
        hook=hook,
    )


def launching_into_the_pool(world: World) -> tuple[LifecycleRecord, StepEngine]:
    """A launch into a running warm pool at its completion, no step before it (its instance held in
    ``Warmed:Pending:Wait`` by the launch hook), and the engine that completes it."""
    world.autoscaling.issue("into", INSTANCE, hook=("nodes", "launch"), held_in="Warmed:Pending:Wait")
    record = make_record(
        (Step.COMPLETE, Step.DONE),
        Step.COMPLETE,
        id=f"{INSTANCE}/launch/into",
        transition=Transition.LAUNCHING,
        token="into",
        hook="launch",
        origin="EC2",
        destination=WARM_POOL,
        verified_at=None,
    )
    world.records.create(record)
    return record, world.engine({Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)})


def drained(world: World, held_in: str | None = None, **changes: object) -> StepEngine:
    """A drained termination at its completion, confirmed by a step before this run (its instance held where
    ``held_in`` says, ``Terminating:Wait`` unless told), and the engine that completes it (its cleanup waits)."""
    world.autoscaling.issue("token", INSTANCE, hook=("nodes", "terminate"), held_in=held_in)
    world.records.create(make_record(PLAN, Step.COMPLETE, **changes))
    return world.engine(
        {
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics),
            Step.CLEANUP: Script([Outcome.wait(5)]),
        }
    )


@pytest.mark.parametrize("how", ["landed", "by-hand"])
def test_a_retried_completion_of_a_launch_into_the_pool_leaves_the_instances_next_launch_action(
    how: str,
) -> None:
    # Given a launch into a running warm pool, its completion throttled (and, landed, its answer lost)
    world = World(autoscaling=ThrottledOnce(landed=how == "landed"))
    into_pool, engine = launching_into_the_pool(world)
    engine.handle(world.message(into_pool.id))
    assert world.record().step is Step.COMPLETE  # (its retry due in seconds)

    # When its action ended meanwhile, the instance was drawn out of the pool (Pending:Wait under the launch hook,
    # a new action), and the completion's retry runs
    ended_unknown(world.autoscaling, into_pool.action, how)
    drawn = next_action(world.autoscaling, "launch", "Pending:Wait")
    world.clock.current = world.record().due_at
    engine.handle(world.message(into_pool.id))

    # Then the new action is left to its own lifecycle (its address, its readiness gate), and this one is over,
    # settled elsewhere
    assert world.autoscaling.heartbeat(drawn), (
        "the stale completion settled the instance's next launch action"
    )
    assert world.record().finished
    assert world.record().extra.get(SETTLED_ELSEWHERE)


def test_a_settlement_of_a_scale_in_to_the_pool_leaves_the_instances_next_terminating_action() -> None:
    # Given a drain of a scale-in back to the warm pool, stalled at the last sweep before its global timeout, its action
    # completed by an operator since its last heartbeat, and the instance held by the terminating hook again (the
    # pool's shrinking: Warmed:Terminating:Wait, a new action)
    repair = Repair()
    repair.autoscaling.issue("token", INSTANCE, hook=("nodes", "terminate"), held_in="Warmed:Pending:Wait")
    stalled_at_its_last_chance(repair, origin="AutoScalingGroup", destination=WARM_POOL)
    (record,) = repair.records.items.values()
    ended_unknown(repair.autoscaling, record.action, "by-hand")
    shrunk = next_action(repair.autoscaling, "terminate", "Warmed:Terminating:Wait")

    # When the sweep settles it
    repair.run()

    # Then the new action is left to its own lifecycle
    assert repair.autoscaling.heartbeat(shrunk), (
        "the settlement completed the instance's next terminating action"
    )
    (settled,) = repair.records.items.values()
    assert settled.extra.get(SETTLED_ELSEWHERE)


def test_a_termination_out_of_service_completes_without_asking_first() -> None:
    # Given a drained termination whose instance no hook can hold again (it terminates whatever ends its action),
    # confirmed by a step before this run
    world = World()
    engine = drained(world)

    # When it completes
    engine.handle(world.message())

    # Then its completion is the only call (calls per terminate lifecycle: no heartbeat before it)
    assert [named.token for named, _ in world.autoscaling.completed] == ["token"]
    assert world.autoscaling.heartbeats == []


@dataclass
class HeartbeatRefused(FakeAutoscaling):
    """Auto Scaling that denies this role RecordLifecycleActionHeartbeat alone."""

    def heartbeat(self, action: ActionRef) -> bool:
        raise AccessRefused("recording a lifecycle action heartbeat", "AccessDenied", "explicit deny")


def test_a_scale_in_to_the_pool_whose_heartbeat_is_refused_is_completed_all_the_same() -> None:
    # Given a drained scale-in back to the warm pool at its completion, whose heartbeat this role is denied
    world = World(autoscaling=HeartbeatRefused())
    engine = drained(world, "Warmed:Pending:Wait", origin="AutoScalingGroup", destination=WARM_POOL)

    # When it completes
    engine.handle(world.message())

    # Then its action is completed (named by its instance), not left to time out with the hook's default result
    assert [named.token for named, _ in world.autoscaling.completed] == ["token"]
    assert not world.record().extra.get(SETTLED_ELSEWHERE)


def test_a_launch_into_the_pool_completed_at_its_first_try_costs_only_its_confirmation() -> None:
    # Given a launch into the warm pool, no step before its completion
    world = World()
    record, engine = launching_into_the_pool(world)

    # When it completes
    engine.handle(world.message(record.id))

    # Then its confirmation before the claim was the only heartbeat: the run that confirmed it does not ask again
    assert [named.token for named, _ in world.autoscaling.completed] == ["into"]
    assert len(world.autoscaling.heartbeats) == 1


def test_a_launch_the_sweep_settles_at_its_readiness_gate_is_not_asked_about_before_its_completion() -> None:
    # Given a launch out of the warm pool stalled at its readiness gate at the last sweep before its global timeout,
    # whose gate failed three tries (throttled: no completion was ever called)
    repair = Repair()
    launch = {"transition": Transition.LAUNCHING, "hook": "launch", "origin": WARM_POOL, "attempts": 3}
    record_id = stalled_at_its_last_chance(
        repair, step=Step.READY_GATE, destination="AutoScalingGroup", **launch
    )
    gate = repair.records.items[record_id]
    repair.records.items[record_id] = gate.model_copy(
        update={"plan": (Step.READY_GATE, Step.COMPLETE, Step.DONE)}
    )

    # When the sweep settles it
    assert repair.run()["LifecyclesSettled"] == 1

    # Then its completion is the one call: no heartbeat of its token before it (its gate's failed tries were no
    # completion's that may have landed; nor is one due by its deadline, which its global timeout caps)
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    assert repair.autoscaling.heartbeats == [], "the gate's tries were taken for a completion's"
