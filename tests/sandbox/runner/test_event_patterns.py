"""EventBridge pattern matching."""

from __future__ import annotations

import pytest

from nodecycle_sandbox.runner.patterns import InvalidPattern, matches

EVENT = {
    "source": "aws.autoscaling",
    "detail-type": "EC2 Instance-terminate Lifecycle Action",
    "resources": ["arn:a", "arn:b"],
    "detail": {"AutoScalingGroupName": "nodes-general", "Count": 5, "Origin": "AutoScalingGroup"},
}


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        ({"source": ["aws.autoscaling"]}, True),
        ({"source": ["aws.ec2", "aws.autoscaling"]}, True),
        ({"source": ["aws.ec2"]}, False),
        ({"detail-type": [{"prefix": "EC2 Instance-"}]}, True),
        ({"detail": {"AutoScalingGroupName": [{"suffix": "-general"}]}}, True),
        ({"detail": {"AutoScalingGroupName": [{"anything-but": ["nodes-general"]}]}}, False),
        ({"detail": {"AutoScalingGroupName": [{"anything-but": {"prefix": "gpu-"}}]}}, True),
        ({"detail": {"NotificationMetadata": [{"exists": False}]}}, True),
        ({"detail": {"NotificationMetadata": [{"exists": True}]}}, False),
        ({"detail": {"Count": [{"numeric": [">", 1, "<=", 5]}]}}, True),
        ({"detail": {"Count": [{"numeric": ["<", 5]}]}}, False),
        ({"resources": ["arn:b"]}, True),
        ({"detail": {"Origin": [{"equals-ignore-case": "autoscalinggroup"}]}}, True),
        ({"detail": {"Missing": {"Nested": ["x"]}}}, False),
    ],
)
def test_patterns_match_as_eventbridge_does(pattern: dict, expected: bool) -> None:
    assert matches(pattern, EVENT) is expected


def test_an_unknown_operator_is_an_invalid_pattern() -> None:
    with pytest.raises(InvalidPattern, match="wildcard"):
        matches({"source": [{"wildcard": "aws.*"}]}, EVENT)
