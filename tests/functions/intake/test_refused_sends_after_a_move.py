"""Intake of scheduled maintenance that moves a lifecycle already on its record (EC2 moved the maintenance
earlier, or lists another after it), when SQS refuses the move's message after the record was written: the
move takes the lifecycle to a new seq, so the message it was waiting with arrives stale, and the event's retry
(Lambda's, for an asynchronous invocation) is the only delivery left to repair the chain before the sweeper."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sqs.models import sqs_backends

from nodecycle.domain.errors import TransientError
from tests.functions.intake.test_disruption_intake import health_event, launch, records, schedule
from tests.support.functions import LambdaContext
from tests.support.stack import Stack


def held(queue_url: str) -> list[dict[str, Any]]:
    """Every message on the queue, delayed ones included (from moto's queue: a receive does not answer a
    message still delayed, and a maintenance lifecycle's wait for its due time is one)."""
    queue = sqs_backends[DEFAULT_ACCOUNT_ID]["eu-west-1"].queues[queue_url.rsplit("/", 1)[1]]
    return [json.loads(message.body) for message in queue._messages]


class Sends:
    """SQS refusing every SendMessage of the adapters' clients with RequestThrottled while ``throttled`` is set,
    as it answers once botocore's retries are spent (the adapter's real client and error handling: only the
    answer is SQS's refusal)."""

    def __init__(self) -> None:
        self.throttled = False

    def answer(self, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if not self.throttled:
            return None
        error = {"Code": "RequestThrottled", "Message": "Rate exceeded"}
        return AWSResponse("https://sqs", 400, HTTPHeaders(), None), {"Error": error, "ResponseMetadata": {}}

    @contextmanager
    def refused(self) -> Iterator[None]:
        self.throttled = True
        try:
            yield
        finally:
            self.throttled = False


@pytest.fixture
def sends(stack: Stack) -> Iterator[Sends]:
    # On boto3's default session before the adapters' clients are made from it (each copies its handlers)
    sends = Sends()
    events = boto3._get_default_session().events
    # (a before-call handler that answers is botocore's answer to the call: the stubs type it as answering None)
    events.register("before-call.sqs.SendMessage", sends.answer, unique_id="tests.Sends")  # type: ignore[arg-type]
    yield sends
    events.unregister("before-call.sqs.SendMessage", unique_id="tests.Sends")


@pytest.mark.parametrize("move", ["moved-earlier", "another-after-it"])
def test_a_move_whose_message_sqs_refused_is_repaired_by_the_events_retry(
    sends: Sends, intake_fn: ModuleType, stack: Stack, move: str
) -> None:
    # Given a lifecycle waiting (seq 0, its message on the drain queue) for maintenance EC2 lists in three days
    instance = launch()
    now = datetime.now(UTC).replace(microsecond=0)
    first = now + timedelta(days=3)
    schedule(instance, first)
    intake_fn.handler(health_event(instance, first), LambdaContext())
    (waiting,) = records()
    assert [m["seq"] for m in held(stack.drain_queue)] == [0]

    # and EC2 then lists maintenance two days earlier (moved) or a week later (another one), which AWS Health
    # tells of in a new event
    starts = first - timedelta(days=2) if move == "moved-earlier" else first + timedelta(days=7)
    schedule(instance, starts)
    event = health_event(instance, starts, "7e1f0c2a-3b4d-4e5f-8a9b-0c1d2e3f4a5b")

    # When intake takes it in while SQS refuses its sends: the lifecycle moves to seq 1 and the invocation
    # fails (its message was never sent; the seq 0 message will arrive stale)
    with sends.refused(), pytest.raises(TransientError):
        intake_fn.handler(event, LambdaContext())
    (moved,) = records()
    assert (moved["id"], int(moved["seq"])) == (waiting["id"], 1)
    assert [m for m in held(stack.drain_queue) if m["seq"] == 1] == []

    # and Lambda retries the event once SQS takes messages again
    intake_fn.handler(event, LambdaContext())

    # Then the retry leaves the lifecycle a message at its seq (a watch: it comes back when the step is due and
    # sends it again if nothing ran), not a chain with no message until the sweeper finds it overdue; and no
    # second unit of work
    (after,) = records()
    assert int(after["seq"]) == 1
    at_seq = [m for m in held(stack.drain_queue) if m["seq"] == 1]
    assert at_seq == [{"record_id": waiting["id"], "seq": 1, "step": "acquire-slot", "watch": 1}]
