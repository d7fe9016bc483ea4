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


# Real AWS events carry objects, arrays and JSON types the patterns above do not reach: a hook's NotificationMetadata
# that is a JSON object (as EventBridge writes it), AWS Health's affectedEntities, a boolean or a number.
SHAPED = {
    "source": "aws.autoscaling",
    "detail": {
        "NotificationMetadata": {"cluster": "prod"},
        "Tags": [],
        "Flag": True,
        "Count": 1,
    },
}


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [
        # Exists matching works on leaf nodes only (EventBridge's content filtering; SNS filter policies, the same
        # matcher, say it in so many words): an object or an empty array is no leaf, so it does not "exist"
        ({"detail": {"NotificationMetadata": [{"exists": True}]}}, False),
        ({"detail": {"Tags": [{"exists": True}]}}, False),
        ({"detail": {"NotificationMetadata": {"cluster": [{"exists": True}]}}}, True),
        # JSON's true is not the number 1, nor 1 true (Python's True == 1 is no JSON equality)
        ({"detail": {"Flag": [1]}}, False),
        ({"detail": {"Count": [True]}}, False),
        ({"detail": {"Flag": [True]}}, True),
        ({"detail": {"Count": [1]}}, True),
        ({"detail": {"Flag": [{"anything-but": [1]}]}}, True),
        ({"detail": {"Count": [{"anything-but": [True]}]}}, True),
    ],
)
def test_patterns_match_leaves_and_json_types_as_eventbridge_does(pattern: dict, expected: bool) -> None:
    assert matches(pattern, SHAPED) is expected
