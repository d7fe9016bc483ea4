"""A lifecycle call naming this stack's group with the live token of another group's action (another owner's).

AWS documents RecordLifecycleActionHeartbeat and CompleteLifecycleAction as acting "for the specified token or
instance" of the group and hook named, and does not say whether it refuses a token whose action is another
group's. The sandbox, told to take the token alone whatever group is named (``token_checked_against_group``),
shows it first of itself, then of ``AutoscalingActions.confirm``, the engine's confirmation before it disrupts or
completes anything: an action another group holds is not confirmed, nor heartbeated, for a stack that names its
own group with it (a message on its intake queue, forged or sent there by mistake)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.model import ActionRef, Transition
from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.group import AutoScalingGroup, HookSpec
from tests.sandbox.aws.conftest import Emulation, aws  # noqa: F401  (the emulation in process)

HOOKS = (
    HookSpec("nodecycle-launch", LAUNCHING, heartbeat_timeout=60, default_result="CONTINUE"),
    HookSpec("nodecycle-terminate", TERMINATING, heartbeat_timeout=60, default_result="CONTINUE"),
)


def _in_service(aws: Emulation, name: str, size: int) -> AutoScalingGroup:  # noqa: F811
    group = aws.group(*HOOKS, name=name)
    group.set_desired(size)
    for action in group.actions(transition=LAUNCHING):
        aws.autoscaling.complete_lifecycle_action(
            AutoScalingGroupName=name,
            LifecycleHookName="nodecycle-launch",
            LifecycleActionToken=action.token,
            LifecycleActionResult="CONTINUE",
        )
    return group


def _terminating(group: str, instance_id: str, token: str) -> ActionRef:
    return ActionRef(
        group=group,
        hook="nodecycle-terminate",
        instance_id=instance_id,
        token=token,
        transition=Transition.TERMINATING,
        origin="AutoScalingGroup",
        destination="EC2",
    )


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "token-alone"])
def test_the_sandbox_takes_another_groups_token_only_when_told_to(
    aws: Emulation,  # noqa: F811
    checked: bool,
) -> None:
    # Given group "workers-a" and group "workers-b" (the same hook names), and an instance of workers-b terminating
    aws.control.configure(token_checked_against_group=checked)
    _in_service(aws, "workers-a", 1)
    theirs = _in_service(aws, "workers-b", 1)
    (victim,) = theirs.in_state("InService")
    theirs.terminate(victim)
    (held,) = [a for a in theirs.actions(transition=TERMINATING) if a.active]

    # When a heartbeat names workers-a with that action's token and instance
    def heartbeat() -> None:
        aws.autoscaling.record_lifecycle_action_heartbeat(
            AutoScalingGroupName="workers-a",
            LifecycleHookName="nodecycle-terminate",
            LifecycleActionToken=held.token,
            InstanceId=victim,
        )

    # Then it is refused when the token is checked against the group, and reaches workers-b's action when not
    if checked:
        with pytest.raises(ClientError, match="No active Lifecycle Action"):
            heartbeat()
        assert [a.heartbeats for a in theirs.actions(transition=TERMINATING)] == [[]]
    else:
        heartbeat()
        assert [len(a.heartbeats) for a in theirs.actions(transition=TERMINATING)] == [1]


def test_another_groups_action_named_with_this_stacks_group_is_neither_confirmed_nor_heartbeated(
    aws: Emulation,  # noqa: F811
) -> None:
    # Given an Auto Scaling that takes a call's token alone whatever group is named, stack A's group workers-a
    # and stack B's group workers-b (the same hook names), and an instance of workers-b terminating
    aws.control.configure(token_checked_against_group=False)
    _in_service(aws, "workers-a", 1)
    theirs = _in_service(aws, "workers-b", 1)
    (victim,) = theirs.in_state("InService")
    theirs.terminate(victim)
    (held,) = [a for a in theirs.actions(transition=TERMINATING) if a.active]
    port = AutoscalingActions(aws.autoscaling)

    # When stack A's engine is asked to confirm the action its intake took in from a message naming workers-a
    # with that instance and token (the instance does wait where a terminate action holds it: in workers-b)
    confirmed = port.confirm(_terminating("workers-a", victim, held.token))

    # Then it is not confirmed, and workers-b's action was not heartbeated for it (nor completed)
    assert not confirmed
    (after,) = theirs.actions(transition=TERMINATING)
    assert (after.active, after.heartbeats) == (True, [])
    # And workers-b's own naming of it is still confirmed
    assert port.confirm(_terminating("workers-b", victim, held.token))
