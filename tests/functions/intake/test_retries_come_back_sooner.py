"""A record of the intake queue retried on purpose (a TransientError: DynamoDB or Auto Scaling throttled) came back
only after the queue's visibility timeout, 180 s, while its lifecycle action's heartbeat timeout (300 s at the
shortest) ran: a lone throttle delayed the hook's drain by three minutes. Intake now shortens that record's
visibility (ChangeMessageVisibility by its receipt handle, the permission template.yaml grants IntakeFunction):
10 s at its first receive, or as long as its error says to wait; its later receives at the queue's timeout, so the
dead-letter queue still rides out a throttle of minutes. Best effort: a change SQS refuses (the message received
again by another invocation, no longer in flight) leaves the record to the queue's timeout, its failure reported
all the same; a record that succeeds costs no call. On moto with the sandbox's SQS as strict as SQS
(``aws/sqs_attributes.py``), the queue's clock moved on rather than waited for."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import moto.sqs.models
import pytest

from nodecycle import entrypoints
from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.errors import TransientError
from nodecycle.domain.intake_budget import OutOfTime
from nodecycle.wiring.intake import INTAKE_QUEUE_VISIBILITY_SECONDS
from nodecycle_sandbox.aws import sqs_attributes
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.functions.intake.test_intake_function import records, work
from tests.functions.intake.test_killed_invocation import intake_queue, received
from tests.functions.intake.test_retries_alone_in_a_batch import THROTTLED, Answering, dynamodb
from tests.support.events import happening_now, load_event
from tests.support.functions import LambdaContext
from tests.support.stack import TEMPLATE, Stack

__all__ = ["dynamodb", "intake_queue"]  # (the fixtures, imported to be used here)


class QueueClock:
    """SQS's clock (moto's, the records' timestamps) and the functions' (their records' times, SQS's timestamps
    read), moved on together from the wall clock's now."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.offset = 0.0
        real_seconds = moto.sqs.models.unix_time
        real_millis = moto.sqs.models.unix_time_millis
        monkeypatch.setattr(moto.sqs.models, "unix_time", lambda dt=None: real_seconds(dt) + self.offset)
        monkeypatch.setattr(
            moto.sqs.models, "unix_time_millis", lambda dt=None: real_millis(dt) + self.offset * 1000
        )
        wall = entrypoints.now
        monkeypatch.setattr(entrypoints, "now", lambda: wall() + self.offset)
        monkeypatch.setattr(SystemClock, "now", lambda _: datetime.now(UTC) + timedelta(seconds=self.offset))


@pytest.fixture
def queue(intake_queue: tuple[str, str, int, int], monkeypatch: pytest.MonkeyPatch) -> str:
    """The intake queue as the template makes it, SQS as strict as SQS about visibility changes, and the function
    told its URL (template.yaml's IntakeFunction environment)."""
    sqs_attributes.install()
    url = intake_queue[0]
    monkeypatch.setenv("NODECYCLE_INTAKE_QUEUE_URL", url)
    return url


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> QueueClock:
    return QueueClock(monkeypatch)


@dataclass(frozen=True)
class Delivered:
    """A message of the intake queue as Lambda's poller handed it over, and the queue's clock."""

    queue: str
    clock: QueueClock
    batch: dict[str, Any]

    @property
    def record(self) -> dict[str, Any]:
        return dict(self.batch["Records"][0])


@pytest.fixture
def first(queue: str, clock: QueueClock, dynamodb: Answering) -> Delivered:
    """A terminate hook's notification on the intake queue, at its first delivery, and DynamoDB throttling its
    record's write (``dynamodb.answer = None`` ends it)."""
    body = happening_now(load_event("sqs-hook-terminate.json"))["Records"][0]["body"]
    boto3.client("sqs").send_message(QueueUrl=queue, MessageBody=body)
    _, batch = next_delivery(queue, clock, 0)
    dynamodb.answer = THROTTLED
    return Delivered(queue, clock, batch)


def next_delivery(queue: str, clock: QueueClock, within: int) -> tuple[float, dict[str, Any]]:
    """The queue's next delivery, the clock moved on until it comes (a second at a time for the first 20 s, then
    5 s): how long that took."""
    start = clock.offset
    while clock.offset - start <= within:
        batch = received(queue)
        if batch is not None:
            return clock.offset - start, batch
        clock.offset += 1 if clock.offset - start < 20 else 5
    raise AssertionError(f"nothing delivered within {within} s")


@pytest.fixture
def visibility_changes(stack: Stack) -> Iterator[list[dict[str, Any]]]:
    """The ChangeMessageVisibility calls the functions' clients make."""
    calls: list[dict[str, Any]] = []

    def note(params: dict[str, Any], **_: Any) -> None:
        calls.append(dict(params))

    events = boto3._get_default_session().events
    events.register("provide-client-params.sqs.ChangeMessageVisibility", note, unique_id="tests.changes")
    yield calls
    events.unregister("provide-client-params.sqs.ChangeMessageVisibility", unique_id="tests.changes")


def test_the_template_and_the_wiring_agree_on_the_intake_queues_visibility_timeout() -> None:
    properties = load_template(TEMPLATE)["Resources"]["IntakeQueue"]["Properties"]
    assert properties["VisibilityTimeout"] == INTAKE_QUEUE_VISIBILITY_SECONDS


def test_a_lone_throttled_record_comes_back_in_seconds_not_after_the_queues_visibility_timeout(
    dynamodb: Answering,
    intake_fn: ModuleType,
    first: Delivered,
    stack: Stack,
    visibility_changes: list[dict[str, Any]],
) -> None:
    # Given a terminate hook's notification on the intake queue, delivered, and DynamoDB throttling its write
    # When intake takes it in, Then it is retried (its failure reported, the invocation not failed)
    failed = [{"itemIdentifier": first.record["messageId"]}]
    assert intake_fn.handler(first.batch, LambdaContext()) == {"batchItemFailures": failed}
    dynamodb.answer = None

    # And the queue delivers it again 10 s on, not 180 s (before: 178-180 s, the queue's visibility timeout), and
    # it is taken in: its lifecycle's record and first step, 10 s after the hook
    waited, again = next_delivery(first.queue, first.clock, INTAKE_QUEUE_VISIBILITY_SECONDS)
    assert waited <= entrypoints.FIRST_RETRY_SECONDS
    assert intake_fn.handler(again, LambdaContext()) == {"batchItemFailures": []}
    (record,) = records()
    assert work(stack.drain_queue) == [{"record_id": record["id"], "seq": 0, "step": "acquire-slot"}]

    # And only the retried record cost a ChangeMessageVisibility: the one that succeeded, none
    assert [(c["ReceiptHandle"], c["VisibilityTimeout"]) for c in visibility_changes] == [
        (first.record["receiptHandle"], entrypoints.FIRST_RETRY_SECONDS)
    ]


def test_a_record_received_again_meanwhile_keeps_its_visibility_and_its_failure_is_reported(
    dynamodb: Answering,
    intake_fn: ModuleType,
    first: Delivered,
    visibility_changes: list[dict[str, Any]],
) -> None:
    # Given a hook notification delivered, then delivered again to another invocation before the first is over
    # (a duplicate delivery: the first receipt handle has expired), and DynamoDB throttling its write
    boto3.client("sqs").change_message_visibility(
        QueueUrl=first.queue, ReceiptHandle=first.record["receiptHandle"], VisibilityTimeout=0
    )
    _, second = next_delivery(first.queue, first.clock, 1)

    # When the first invocation retries it, Then SQS refuses the shorter visibility by the expired handle, and
    # the record is retried all the same (its failure reported, the invocation not failed)
    failed = [{"itemIdentifier": first.record["messageId"]}]
    assert intake_fn.handler(first.batch, LambdaContext()) == {"batchItemFailures": failed}
    assert len(visibility_changes) == 2  # (the test's own, then intake's, refused)

    # And the second delivery keeps the queue's visibility timeout: nothing until it runs out
    dynamodb.answer = None
    with pytest.raises(AssertionError, match="nothing delivered"):
        next_delivery(first.queue, first.clock, INTAKE_QUEUE_VISIBILITY_SECONDS - 10)
    assert second["Records"][0]["receiptHandle"] != first.record["receiptHandle"]


def test_a_throttle_that_outlasts_the_sooner_retry_is_retried_at_the_queues_timeout_then_fails_the_invocation(
    intake_fn: ModuleType,
    first: Delivered,
    visibility_changes: list[dict[str, Any]],
) -> None:
    # Given a hook notification delivered, and DynamoDB throttling its write for good
    intake_fn.handler(first.batch, LambdaContext())

    # When its sooner retry (10 s on) finds the throttle still there, Then it is an ordinary retry again (no
    # error: a throttle of 10 s pages nobody), left to the queue's timeout (no second change: each receive counts
    # towards the dead-letter queue)
    waited, second = next_delivery(first.queue, first.clock, INTAKE_QUEUE_VISIBILITY_SECONDS)
    assert waited <= entrypoints.FIRST_RETRY_SECONDS
    assert intake_fn.handler(second, LambdaContext())["batchItemFailures"]
    assert len(visibility_changes) == 1

    # And at the redelivery after the queue's timeout, 3 minutes after the first receive as before, the throttle
    # that lasts fails the invocation (the function's error alarm)
    waited, third = next_delivery(first.queue, first.clock, INTAKE_QUEUE_VISIBILITY_SECONDS + 1)
    assert waited > INTAKE_QUEUE_VISIBILITY_SECONDS / 2  # (the wall clock runs on too)
    with pytest.raises(entrypoints.BatchFailed):
        intake_fn.handler(third, LambdaContext())


def record_of(receives: int, first_received_seconds_ago: float = 0.0) -> dict[str, Any]:
    first = (entrypoints.now() - first_received_seconds_ago) * 1000
    return {
        "messageId": "m",
        "receiptHandle": "h",
        "attributes": {
            "ApproximateReceiveCount": str(receives),
            "ApproximateFirstReceiveTimestamp": str(int(first)),
        },
    }


@pytest.mark.parametrize(
    ("error", "receives", "seconds"),
    [
        (TransientError("throttled"), 1, 10),
        (TransientError("throttled"), 2, None),  # (a later receive: at the queue's timeout)
        (TransientError("429", retry_after=45.2), 1, 46),  # (a Retry-After honoured, whole seconds up)
        (TransientError("429", retry_after=3600), 1, 60),  # (up to its cap)
        (OutOfTime("an AWS Health event's instances remain"), 3, 40),  # (progress: doubling at each receive)
        (OutOfTime("an AWS Health event's instances remain"), 5, 160),
        (OutOfTime("an AWS Health event's instances remain"), 6, None),  # (never past the queue's timeout)
    ],
)
def test_how_soon_a_record_retried_comes_back(error: Exception, receives: int, seconds: int | None) -> None:
    assert entrypoints.retry_in(error, record_of(receives), INTAKE_QUEUE_VISIBILITY_SECONDS) == seconds
