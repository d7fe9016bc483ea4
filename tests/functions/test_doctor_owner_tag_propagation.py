"""``nodecycle doctor``'s check of a group managed by tag whose ``nodecycle:owner`` tag does not propagate to its
instances (PropagateAtLaunch false), on Auto Scaling (moto). Intake takes the group's launches by the group's tag, but
the EIP role associates addresses only with instances tagged for the stack (InstancesOfGroupsByTag), and Auto Scaling
copies a group's tag to the instances it launches only when the tag propagates at launch: each launch of the group is
refused its address, and its EIP failure policy decides (abandon: the instance replaced, again and again). The doctor
said nothing of it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.doctor import aws_checks

OWNER = "stack-a"


def rules(*, eip: bool, named: tuple[str, ...] = ()) -> aws_checks.HookRules:
    transitions = (aws_checks.LAUNCHING, aws_checks.TERMINATING) if eip else (aws_checks.TERMINATING,)
    return aws_checks.HookRules(
        names=("nodecycle-launch", "nodecycle-terminate"),
        transitions=transitions,
        min_heartbeat=330,
        launch_default="CONTINUE",
        owner=OWNER,
        named=named,
        eip=eip,
    )


@pytest.fixture
def autoscaling() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("autoscaling", region_name="eu-west-1")
        client.create_launch_configuration(
            LaunchConfigurationName="workers", ImageId="ami-12c6146b", InstanceType="t3.micro"
        )
        yield client


def add_group(autoscaling: Any, name: str, *, propagates: bool) -> None:
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchConfigurationName="workers",
        MinSize=0,
        MaxSize=1,
        AvailabilityZones=["eu-west-1a"],
        Tags=[
            {
                "ResourceId": name,
                "ResourceType": "auto-scaling-group",
                "Key": "nodecycle:owner",
                "Value": OWNER,
                "PropagateAtLaunch": propagates,
            }
        ],
    )
    for hook, transition in (
        ("nodecycle-launch", aws_checks.LAUNCHING),
        ("nodecycle-terminate", aws_checks.TERMINATING),
    ):
        autoscaling.put_lifecycle_hook(
            AutoScalingGroupName=name,
            LifecycleHookName=hook,
            LifecycleTransition=transition,
            HeartbeatTimeout=600,
            DefaultResult="CONTINUE",
        )


def test_a_group_by_tag_whose_owner_tag_does_not_propagate_is_a_problem_when_addresses_are_on(
    autoscaling: Any,
) -> None:
    # Given two groups tagged for the stack, one whose tag propagates at launch and one whose tag does not
    add_group(autoscaling, "propagated", propagates=True)
    add_group(autoscaling, "kept", propagates=False)

    # When the doctor checks the groups of a stack managing them by tag, with Elastic IPs on
    findings = aws_checks.hooks(autoscaling, ["propagated", "kept"], rules(eip=True))

    # Then the group whose tag does not propagate is a problem, its fix making it propagate; the other is not
    (problem,) = [f for f in findings if f.status != "ok"]
    assert problem.check == "hooks.kept"
    assert "PropagateAtLaunch=true" in (problem.fix or "")


@pytest.mark.parametrize(("eip", "named"), [(False, ()), (True, ("kept",))])
def test_no_problem_without_addresses_or_for_a_group_managed_by_name(
    autoscaling: Any, eip: bool, named: tuple[str, ...]
) -> None:
    # Given a group tagged for the stack whose tag does not propagate
    add_group(autoscaling, "kept", propagates=False)

    # When the doctor checks it for a stack without Elastic IPs, or naming the group (its role granted the group's
    # instances by name), Then nothing is wrong
    findings = aws_checks.hooks(autoscaling, ["kept"], rules(eip=eip, named=named))
    assert [f.what for f in findings if f.status != "ok"] == []
