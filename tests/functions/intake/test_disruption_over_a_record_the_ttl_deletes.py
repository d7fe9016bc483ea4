"""A disruption of an instance whose last lifecycle of the same cause ended long ago (its record past the
table's TTL, which DynamoDB deletes some time after the expiry, at a moment of its own): whether the deletion
lands before intake's write, between its refused write and its read, or between its read and its write over the
finished record, the new disruption starts a lifecycle. Taken for a duplicate, the instance's stop (or Spot
interruption) would go undrained."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle_sandbox.aws import AwsControl
from tests.functions.intake.test_disruption_intake import (
    ec2_event,
    records,
    stopped_once_and_started_again,
    work,
)
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

TABLE = "nodecycle-lifecycle"


def expired_long_ago(record: dict[str, Any]) -> None:
    """The finished record as the table holds it weeks after its lifecycle ended: past its TTL, not deleted yet
    (DynamoDB reads and writes meet it until its TTL deletes it)."""
    boto3.client("dynamodb").update_item(
        TableName=TABLE,
        Key={"id": {"S": str(record["id"])}},
        UpdateExpression="SET expires_at = :past",
        ExpressionAttributeValues={":past": {"N": str(int(time.time()) - 3600)}},
    )


def ttl_runs_after_a_refused_create() -> Callable[..., Any]:
    """``DynamoRecordStore.create``, after which, when it was refused (the item there), DynamoDB's TTL deletes
    what expired: between intake's refused write and its read."""
    create = DynamoRecordStore.create

    def then_the_ttl(self: DynamoRecordStore, record: Any) -> bool:
        written = create(self, record)
        if not written:
            AwsControl(region="eu-west-1").expire_ttl()
        return written

    return then_the_ttl


def ttl_runs_before_a_commit() -> Callable[..., Any]:
    """``DynamoRecordStore.commit``, before which DynamoDB's TTL deletes what expired: between intake's read of
    the finished record and its write over it."""
    commit = DynamoRecordStore.commit

    def the_ttl_first(self: DynamoRecordStore, record: Any, expected_seq: int) -> bool:
        AwsControl(region="eu-west-1").expire_ttl()
        return commit(self, record, expected_seq)

    return the_ttl_first


@pytest.mark.parametrize(
    ("method", "patched"),
    [("create", ttl_runs_after_a_refused_create), ("commit", ttl_runs_before_a_commit)],
    ids=["after-the-refused-create", "before-the-write-over-it"],
)
def test_a_stop_whose_old_record_the_ttl_deletes_meanwhile_starts_its_lifecycle(
    intake_fn: ModuleType,
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    patched: Callable[[], Callable[..., Any]],
) -> None:
    # Given an instance stopped outside the hooks long ago (its lifecycle over, its record past the TTL), started
    # again since
    instance, first = stopped_once_and_started_again(intake_fn, stack)
    expired_long_ago(first)
    # and DynamoDB's TTL deleting that record while intake takes in the instance's next stop
    monkeypatch.setattr(DynamoRecordStore, method, patched())

    # When the instance is stopped again (a new event, of its own id)
    boto3.client("ec2").stop_instances(InstanceIds=[instance])
    again = ec2_event("eventbridge-instance-stopped.json", instance, state="stopping")
    again["id"] = "5d0c7e0a-95b3-4c4c-9d0e-6a2f1b8e7c31"
    intake_fn.handler(again, LambdaContext())

    # Then it is another stop: its lifecycle starts, and frees what the instance held since it ran again
    (after,) = records()
    assert (after["token"], after["step"]) == (again["id"], "forget-node")
    assert [m["step"] for m in work(stack.drain_queue)] == ["forget-node"]
