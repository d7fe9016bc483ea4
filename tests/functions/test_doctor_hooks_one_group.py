"""``nodecycle doctor``'s hooks check when Auto Scaling throttles the hooks of one group, past botocore's
retries (the sandbox's AWS endpoint: moto behind its fault layer, Auto Scaling's own ``Throttling``): the
other groups' hooks are still checked, as one rule or queue that cannot be read hides none of the others.
Raised out of the whole check, it was one "cannot check" for every group, a missing terminate hook among them
unseen."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config

from nodecycle_cli.doctor import aws_checks
from nodecycle_sandbox.aws.faults import FAULTS
from nodecycle_sandbox.aws.server import MotoServer
from nodecycle_sandbox.faults import Fault
from tests.functions.test_doctor_hooks import RULES, add_group

OPERATOR_KEY = "AKIAOPERATORHOOKS001"  # this module's own


@pytest.fixture
def autoscaling() -> Iterator[Any]:
    server = MotoServer()
    client = boto3.client(
        "autoscaling",
        endpoint_url=server.start(),
        region_name="eu-west-1",
        aws_access_key_id=OPERATOR_KEY,
        aws_secret_access_key="secret",
        config=Config(retries={"total_max_attempts": 1, "mode": "standard"}),
    )
    client.create_launch_configuration(
        LaunchConfigurationName="workers", ImageId="ami-12c6146b", InstanceType="t3.micro"
    )
    yield client
    FAULTS.disarm()
    server.stop()


def test_a_group_whose_hooks_are_throttled_hides_none_of_the_others(autoscaling: Any) -> None:
    # Given two groups: "first" with its terminate hook, "second" without one
    add_group(autoscaling, "first")
    add_group(autoscaling, "second")
    autoscaling.delete_lifecycle_hook(AutoScalingGroupName="second", LifecycleHookName="nodecycle-terminate")
    # and Auto Scaling throttling the next DescribeLifecycleHooks (the first group's)
    FAULTS.arm_for(
        [Fault("t", "aws-throttle", target="autoscaling.DescribeLifecycleHooks", limit=1)],
        seed=1,
        callers=[OPERATOR_KEY],
    )

    # When the doctor checks their hooks
    findings = aws_checks.hooks(autoscaling, ["first", "second"], RULES)

    # Then the first group's is a check not made, saying why, and the second's missing hook is found
    by_check = {f.check: f for f in findings}
    assert FAULTS.counts() == {"aws-throttle": 1}
    assert by_check["hooks.first"].status == "unchecked"
    assert "Throttling" in by_check["hooks.first"].what
    assert by_check["hooks.second"].status == "problem"
    assert "no terminate hook" in by_check["hooks.second"].what
