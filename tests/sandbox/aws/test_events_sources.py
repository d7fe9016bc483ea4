"""PutEvents refuses the aws.* sources of AWS's own events, entry by entry, as EventBridge does."""

from __future__ import annotations

import json
from typing import Any

import boto3

from tests.sandbox.aws.conftest import OPERATOR_KEY, REGION, Emulation

LIFECYCLE = {
    "Source": "aws.autoscaling",
    "DetailType": "EC2 Instance-terminate Lifecycle Action",
    "Detail": json.dumps({"EC2InstanceId": "i-0123456789abcdef0"}),
}
CUSTOM = {"Source": "example.operator", "DetailType": "note", "Detail": "{}"}


def test_an_aws_source_is_refused_and_the_other_entries_are_put(aws: Emulation) -> None:
    # Given an operator's EventBridge client
    events = _events()

    # When it puts back a dead-lettered lifecycle event beside an event of its own
    answer = events.put_events(Entries=[LIFECYCLE, CUSTOM, {**LIFECYCLE, "Source": "aws.ec2"}])

    # Then the aws.* entries are refused, not authorized for their source, and its own is put
    assert answer["FailedEntryCount"] == 2
    first, second, third = answer["Entries"]
    refused = ["ErrorCode", "ErrorMessage"]
    assert [sorted(e) for e in answer["Entries"]] == [refused, ["EventId"], refused]
    assert first["ErrorCode"] == third["ErrorCode"] == "NotAuthorizedForSourceException"
    assert second["EventId"]


def test_a_source_that_only_contains_aws_is_put(aws: Emulation) -> None:
    answer = _events().put_events(Entries=[{**CUSTOM, "Source": "my.aws.tooling"}])

    assert answer["FailedEntryCount"] == 0


def _events() -> Any:
    return boto3.client(
        "events", region_name=REGION, aws_access_key_id=OPERATOR_KEY, aws_secret_access_key="testing"
    )
