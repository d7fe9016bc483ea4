"""An adopted lifecycle names its action by instance id (no API tells an action's token), and Auto Scaling
completes by instance id whatever action the hook holds for the instance now: AutoscalingActions on moto with
the sandbox's lifecycle emulation (which answers as AWS documents it: the instance's active action under the
hook) never lets a late call of an adopted lifecycle settle a newer action of its instance."""

from __future__ import annotations

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.model import WARM_POOL, ActionRef, Transition, adopted_token
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.group import HookSpec, WarmPoolSpec
from tests.sandbox.aws.conftest import Emulation, aws  # noqa: F401  (the emulation in process)

HOOKS = (
    HookSpec("launch", LAUNCHING, heartbeat_timeout=60, default_result="ABANDON"),
    HookSpec("drain", TERMINATING, heartbeat_timeout=60, default_result="CONTINUE"),
)
ONE_WARMED = WarmPoolSpec(min_size=1, max_group_prepared_capacity=0)


def adopted_launch_into_the_pool(instance_id: str) -> ActionRef:
    """The action the sweeper adopts for an instance in Warmed:Pending:Wait under the launch hook."""
    return ActionRef(
        group="workers",
        hook="launch",
        instance_id=instance_id,
        token=adopted_token("launch"),
        transition=Transition.LAUNCHING,
        destination=WARM_POOL,
    )


def test_a_late_retry_of_an_adopted_completion_does_not_complete_the_instances_next_launch(
    aws: Emulation,  # noqa: F811
) -> None:
    # Given an instance launching into a warm pool whose launch action was adopted (its event lost), and
    # whose completion landed though its answer was lost (a read timeout)
    group = aws.group(*HOOKS, warm_pool=ONE_WARMED)
    ((pooled, state),) = group.pool_instances().items()
    assert state == "Warmed:Pending:Wait"
    port = AutoscalingActions(aws.autoscaling)
    adopted = adopted_launch_into_the_pool(pooled)
    assert port.complete(adopted, ActionResult.CONTINUE)

    # When the group scales out, taking the instance from the pool through the same launch hook (a newer
    # action, with its own lifecycle: its address, its readiness gate), and then the adopted completion's retry
    # comes
    group.set_desired(1)
    assert group.instances() == {pooled: "Pending:Wait"}
    retried = port.complete(adopted, ActionResult.CONTINUE)

    # Then it finds the adopted action settled, and the newer action is still held for its own lifecycle
    assert retried is False
    assert group.instances() == {pooled: "Pending:Wait"}
    (newer,) = [a for a in group.actions() if a.instance_id == pooled and a.active]
    assert newer.result is None


def test_an_adopted_action_still_held_is_heartbeated_and_completed_by_instance_id(
    aws: Emulation,  # noqa: F811
) -> None:
    # Given an instance launching into a warm pool whose launch action was adopted
    group = aws.group(*HOOKS, warm_pool=ONE_WARMED)
    ((pooled, _),) = group.pool_instances().items()
    port = AutoscalingActions(aws.autoscaling)
    adopted = adopted_launch_into_the_pool(pooled)

    # When its lifecycle heartbeats and completes it, Then Auto Scaling takes both, and the instance goes on
    # into the pool
    assert port.heartbeat(adopted)
    assert port.complete(adopted, ActionResult.CONTINUE)
    assert group.pool_instances() == {pooled: "Warmed:Stopped"}
