"""AutoscalingActions.confirm and complete, the engine's confirmation before it disrupts anything for an action and
its completion: on moto with the sandbox's lifecycle emulation told to take a call's token alone
(``token_checked_against_instance``), as AWS may ("for the specified token or instance": it does not say it
refuses a token named with another instance), a token paired with an instance its action does not hold confirms
nothing, though the heartbeat itself is accepted; one paired with an instance the hook holds for an action of its
own settles that instance's action alone; and with a stub, an instance whose state still lags its wait state is
retried, not refused."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.group import AutoScalingGroup, HookSpec
from tests.sandbox.aws.conftest import Emulation, aws  # noqa: F401  (the emulation in process)

HOOKS = (
    HookSpec("launch", LAUNCHING, heartbeat_timeout=60, default_result="CONTINUE"),
    HookSpec("drain", TERMINATING, heartbeat_timeout=60, default_result="CONTINUE"),
)


def terminating(instance_id: str, token: str) -> ActionRef:
    """The action a terminate notification names (from its group into EC2)."""
    return ActionRef(
        group="workers",
        hook="drain",
        instance_id=instance_id,
        token=token,
        transition=Transition.TERMINATING,
        origin="AutoScalingGroup",
        destination="EC2",
    )


def lenient_group_of_two(emulation: Emulation) -> AutoScalingGroup:
    """The group of two instances in service, under an Auto Scaling that takes a call's token alone."""
    emulation.control.configure(token_checked_against_instance=False)
    group = emulation.group(*HOOKS)
    group.set_desired(2)
    for action in group.actions(transition=LAUNCHING):
        emulation.autoscaling.complete_lifecycle_action(
            AutoScalingGroupName="workers",
            LifecycleHookName="launch",
            LifecycleActionToken=action.token,
            LifecycleActionResult="CONTINUE",
        )
    return group


def test_an_instance_in_service_named_with_another_instances_live_token_is_not_confirmed(
    aws: Emulation,  # noqa: F811
) -> None:
    # Given an Auto Scaling that takes a call's token alone, and two instances in service, one of them then
    # terminating (its action waiting under the drain hook)
    group = lenient_group_of_two(aws)
    bystander, victim = sorted(group.in_state("InService"))
    group.terminate(victim)
    (held,) = [a for a in group.actions(transition=TERMINATING) if a.active]
    port = AutoscalingActions(aws.autoscaling)
    forged = terminating(bystander, held.token)

    # When the port is asked to confirm the action that pairs the instance in service with that token
    # Then Auto Scaling takes the heartbeat (the leniency), but the confirmation refuses it: the instance in
    # service is in no wait state
    assert port.heartbeat(forged)
    assert not port.confirm(forged)
    # And the true pair is confirmed
    assert port.confirm(terminating(victim, held.token))
    assert group.instances()[victim] == "Terminating:Wait"


def test_a_held_instance_named_with_the_token_of_another_held_instance_settles_only_its_own_action(
    aws: Emulation,  # noqa: F811
) -> None:
    # Given an Auto Scaling that takes a call's token alone, and two instances in service, both then terminating
    # (each one's action waiting under the drain hook)
    group = lenient_group_of_two(aws)
    first, second = sorted(group.in_state("InService"))
    group.terminate(first)
    group.terminate(second)
    (held,) = [a for a in group.actions(transition=TERMINATING) if a.active and a.instance_id == second]
    port = AutoscalingActions(aws.autoscaling)
    # (a notification on the intake queue naming the first instance with the second's token)
    crossed = terminating(first, held.token)

    # When its lifecycle confirms it (nothing tells the pair: both instances wait where their actions hold them,
    # and no API tells a token's instance) and, the first instance drained, completes it
    assert port.confirm(crossed)
    assert port.complete(crossed, ActionResult.CONTINUE)

    # Then the action settled is the first instance's, the one named and drained: the second's still holds its
    # instance for its own lifecycle's drain (named by the token, the completion settled it: its node went
    # undrained)
    assert held.active
    assert group.instances()[second] == "Terminating:Wait"
    (own,) = [a for a in group.actions(transition=TERMINATING) if a.instance_id == first]
    assert (own.active, own.result) == (False, "CONTINUE")


def test_an_instance_whose_state_still_lags_its_wait_state_is_retried_not_refused() -> None:
    client = boto3.client("autoscaling", region_name="eu-west-1")
    action = terminating("i-0a1b2c3d4e5f60718", "9f0c3d3e-6a8b-4c8e-9d57-2f7b1e0a6c41")
    with Stubber(client) as stubber:
        # (the look comes before the heartbeat: an action is heartbeated only in the group it names)
        stubber.add_response(
            "describe_auto_scaling_instances",
            {
                "AutoScalingInstances": [
                    {
                        "InstanceId": action.instance_id,
                        "AutoScalingGroupName": "workers",
                        "AvailabilityZone": "eu-west-1a",
                        "LifecycleState": "Terminating",
                        "HealthStatus": "HEALTHY",
                        "ProtectedFromScaleIn": False,
                    }
                ]
            },
            {"InstanceIds": [action.instance_id]},
        )
        stubber.add_response("record_lifecycle_action_heartbeat", {})
        with pytest.raises(TransientError, match="not yet Terminating:Wait"):
            AutoscalingActions(client).confirm(action)
