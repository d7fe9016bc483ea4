from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import boto3
import pytest

from tests.support.functions import load_function
from tests.support.stack import Stack

GROUP = "nodes-general"
TERMINATE_HOOK = "nodecycle-terminate"
LAUNCH_HOOK = "nodecycle-launch"
HEARTBEAT_TIMEOUT = 300


def make_group(name: str, tags: dict[str, str] | None = None) -> None:
    """An Auto Scaling group (no instances) with a launch and a terminate hook, on moto."""
    ec2 = boto3.client("ec2")
    if not ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": ["nodes"]}])[
        "LaunchTemplates"
    ]:
        ec2.create_launch_template(
            LaunchTemplateName="nodes",
            LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "m6g.large"},
        )
    autoscaling = boto3.client("autoscaling")
    autoscaling.create_auto_scaling_group(
        AutoScalingGroupName=name,
        LaunchTemplate={"LaunchTemplateName": "nodes"},
        MinSize=0,
        MaxSize=10,
        DesiredCapacity=0,
        AvailabilityZones=["eu-west-1a"],
        Tags=[
            {"Key": key, "Value": value, "PropagateAtLaunch": False} for key, value in (tags or {}).items()
        ],
    )
    for hook, transition in (
        (TERMINATE_HOOK, "autoscaling:EC2_INSTANCE_TERMINATING"),
        (LAUNCH_HOOK, "autoscaling:EC2_INSTANCE_LAUNCHING"),
    ):
        autoscaling.put_lifecycle_hook(
            AutoScalingGroupName=name,
            LifecycleHookName=hook,
            LifecycleTransition=transition,
            HeartbeatTimeout=HEARTBEAT_TIMEOUT,
            DefaultResult="ABANDON",
        )


@pytest.fixture
def group(stack: Stack) -> str:
    make_group(GROUP)
    return GROUP


@pytest.fixture
def intake_fn(stack: Stack, group: str) -> Iterator[ModuleType]:
    return load_function("intake")
