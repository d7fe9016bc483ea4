"""An AWS Health event naming several instances, one of which has a lifecycle record this release cannot read
(written by a newer release before a rollback, or edited by hand): the others are taken in all the same, and
the event still fails (its error logged, retried, then dead-lettered), coming back to the unreadable one only."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType

import boto3
import pytest

from nodecycle.domain.model import Transition, record_id
from tests.functions.intake.test_disruption_intake import (
    delayed,
    health_event,
    health_event_of,
    many_scheduled,
    records,
)
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

TABLE = "nodecycle-lifecycle"


def unreadable(instance: str) -> None:
    """The instance's maintenance record as a newer release left it: a step this release does not know."""
    boto3.client("dynamodb").update_item(
        TableName=TABLE,
        Key={"id": {"S": record_id(instance, Transition.SCHEDULED_CHANGE, "")}},
        UpdateExpression="SET step = :step",
        ExpressionAttributeValues={":step": {"S": "a-step-of-a-newer-release"}},
    )


def test_one_unreadable_record_does_not_keep_the_events_other_instances_from_being_taken_in(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given three instances whose retirement EC2 scheduled, the first of which has a record this release
    # cannot read (an earlier Health event took it in; a newer release wrote it since)
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    first, *others = many_scheduled(3, starts)
    intake_fn.handler(health_event(first, starts, "an-earlier-event"), LambdaContext())
    unreadable(first)
    capsys.readouterr()
    messages = delayed(stack.drain_queue)

    # When an AWS Health event naming the three arrives (the first named first)
    event = health_event_of([first, *others], starts)
    event["id"] = "the-retirement-event"
    with pytest.raises(Exception) as failed:
        intake_fn.handler(event, LambdaContext())

    # Then it fails for the unreadable record (Lambda retries it, then its failure destination keeps it), but
    # the other two were taken in: a record and a drain message each
    assert "a-step-of-a-newer-release" in str(failed.value)
    assert sorted(r["instance_id"] for r in records() if r["instance_id"] in others) == sorted(others)
    assert delayed(stack.drain_queue) == messages + len(others)
    assert "a-step-of-a-newer-release" in capsys.readouterr().out

    # And its retry comes back to the unreadable one, failing again, the others' lifecycles left as they are
    # (duplicates now)
    taken_in = records()
    with pytest.raises(Exception) as again:
        intake_fn.handler(event, LambdaContext())
    assert "a-step-of-a-newer-release" in str(again.value)
    assert records() == taken_in
