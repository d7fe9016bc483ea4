"""PutTargets refuses a target's RetryPolicy beyond EventBridge's ranges (botocore's events model: RetryPolicy
MaximumRetryAttempts 0 to 185, MaximumEventAgeInSeconds 60 to 86,400; a client checks only the least): a
template's rule event with such a policy fails the stack. moto took any."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_sandbox.aws.install import install
from tests.sandbox.aws.conftest import REGION

FUNCTION = "arn:aws:lambda:eu-west-1:123456789012:function:worker"


@pytest.fixture
def events() -> Iterator[Any]:
    install()
    with mock_aws():
        client = boto3.client("events", region_name=REGION)
        client.put_rule(Name="lifecycle", EventPattern='{"source": ["aws.autoscaling"]}')
        yield client


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({"MaximumRetryAttempts": 186}, "maximumRetryAttempts"),
        ({"MaximumEventAgeInSeconds": 86401}, "maximumEventAgeInSeconds"),
    ],
)
def test_a_retry_policy_beyond_eventbridges_ranges_is_refused(
    events: Any, policy: dict[str, int], says: str
) -> None:
    with pytest.raises(ClientError) as refused:
        events.put_targets(Rule="lifecycle", Targets=[{"Id": "fn", "Arn": FUNCTION, "RetryPolicy": policy}])

    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert says in refused.value.response["Error"]["Message"]
    assert events.list_targets_by_rule(Rule="lifecycle")["Targets"] == []
    # (the template's own, at the ranges' ends, are taken)
    events.put_targets(
        Rule="lifecycle",
        Targets=[
            {
                "Id": "fn",
                "Arn": FUNCTION,
                "RetryPolicy": {"MaximumRetryAttempts": 185, "MaximumEventAgeInSeconds": 86400},
            }
        ],
    )
