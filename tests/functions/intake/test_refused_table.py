"""The lifecycle table refused to intake (a service control policy or a permissions boundary changed for a
while) on the queue's path: the record's write, and every call. Each record of the batch that needs the table
fails alone (SQS delivers it again), none is dropped as bad input or taken for a duplicate, and once the
refusal is lifted the redelivery takes each in once."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import ModuleType

import pytest

from nodecycle.adapters.clock import SystemClock
from tests.functions.intake.test_refused_writes import (
    hook_notifications,
    intake_as_role,
    records,
    refuse,
)
from tests.support.emf import metric
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all

__all__ = ["intake_as_role", "refuse"]  # (the fixtures)


# (GetItem alone refused refuses nothing here: a new action's record and claim are written unread)
@pytest.mark.parametrize("refused", ["dynamodb:PutItem", "dynamodb:*"])
def test_a_lifecycle_table_refused_fails_the_records_that_need_it_and_their_redelivery_takes_them_in_once(
    refuse: Callable[[str | None], None],
    intake_as_role: ModuleType,
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    refused: str,
) -> None:
    # Given intake refused a call on its lifecycle table, and a batch of two terminate hook notifications
    # beside a bad record
    refuse(refused)
    batch = sqs_event(*hook_notifications(), "{truncated")

    # When intake takes in the batch
    response = intake_as_role.handler(batch, LambdaContext())

    # Then the two actions fail alone, nothing is sent, and nothing but the bad record is rejected or counted a
    # duplicate
    assert response == {
        "batchItemFailures": [{"itemIdentifier": "message-0"}, {"itemIdentifier": "message-1"}]
    }
    assert receive_all(stack.drain_queue) == []
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="malformed-json") == 1
    assert metric(output, "LifecycleEventsDuplicate") == 0

    # When the refusal ends and SQS delivers the two again, after the queue's visibility timeout
    refuse(None)
    later = datetime.now(UTC) + timedelta(seconds=180)
    monkeypatch.setattr(SystemClock, "now", lambda self: later)
    response = intake_as_role.handler(sqs_event(*hook_notifications()), LambdaContext())

    # Then each has one record and one first step
    assert response == {"batchItemFailures": []}
    ids = sorted(record["id"] for record in records())
    assert len(ids) == 2
    sent = [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)]
    assert sorted((m["record_id"], m["step"]) for m in sent) == [(id_, "acquire-slot") for id_ in ids]
