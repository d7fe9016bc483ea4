"""``nodecycle doctor``'s check of the managed groups' hooks on Auto Scaling (moto), as AWS pages its answers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.doctor import aws_checks
from nodecycle_sandbox.aws import autoscaling_names

RULES = aws_checks.HookRules(
    names=("nodecycle-terminate",),
    transitions=(aws_checks.TERMINATING,),
    min_heartbeat=330,
    launch_default="CONTINUE",
)


@pytest.fixture
def autoscaling() -> Iterator[Any]:
    autoscaling_names.install()  # (at most 50 group names a DescribeAutoScalingGroups call, as Auto Scaling)
    with mock_aws():
        client = boto3.client("autoscaling", region_name="eu-west-1")
        client.create_launch_configuration(
            LaunchConfigurationName="workers", ImageId="ami-12c6146b", InstanceType="t3.micro"
        )
        yield client


def add_group(autoscaling: Any, name: str) -> None:
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchConfigurationName="workers",
        MinSize=0,
        MaxSize=1,
        AvailabilityZones=["eu-west-1a"],
    )
    autoscaling.put_lifecycle_hook(
        AutoScalingGroupName=name,
        LifecycleHookName="nodecycle-terminate",
        LifecycleTransition=aws_checks.TERMINATING,
        HeartbeatTimeout=600,
        DefaultResult="CONTINUE",
    )


def test_every_group_of_a_stack_managing_more_than_one_page_of_them_is_checked(autoscaling: Any) -> None:
    # Given a stack that manages 60 groups, each with its terminate hook: more than the 50 group names that
    # DescribeAutoScalingGroups takes in one call, and than the 50 groups it answers in one page
    groups = [f"workers-{i:02d}" for i in range(60)]
    for group in groups:
        add_group(autoscaling, group)

    # When the doctor checks their hooks
    findings = aws_checks.hooks(autoscaling, groups, RULES)

    # Then every group is found and its hook checked: none is said not to exist
    assert [f.what for f in findings if f.status != "ok"] == []
    assert {f.check for f in findings} == {f"hooks.{group}" for group in groups}
