"""moto's Auto Scaling as the sandbox patches it: DescribeAutoScalingGroups names at most 50 groups a call (100 with
MaxRecords), as Auto Scaling does, with its ValidationError."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import autoscaling_names


@pytest.fixture
def autoscaling() -> Iterator[Any]:
    autoscaling_names.install()
    with mock_aws():
        yield boto3.client("autoscaling", region_name="eu-west-1")


def names(count: int) -> list[str]:
    return [f"group-{n:03d}" for n in range(count)]


def test_more_than_50_group_names_in_a_call_are_refused(autoscaling: Any) -> None:
    # When 51 groups are described in one call (moto described them), Then Auto Scaling's refusal comes
    with pytest.raises(autoscaling.exceptions.ClientError) as refused:
        autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=names(51))
    assert refused.value.response["Error"]["Code"] == "ValidationError"
    assert refused.value.response["Error"]["Message"] == (
        "The number of group names that may be passed in is limited to 50"
    )


def test_50_names_pass_and_max_records_raises_the_limit(autoscaling: Any) -> None:
    assert (
        autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=names(50))["AutoScalingGroups"] == []
    )
    found = autoscaling.describe_auto_scaling_groups(AutoScalingGroupNames=names(100), MaxRecords=100)
    assert found["AutoScalingGroups"] == []
