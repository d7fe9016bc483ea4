"""An intake invocation killed mid-way (Lambda's timeout, the container lost) between a lifecycle's record and
its first message, on the intake queue as the template makes it (its visibility timeout and dead-letter
queue's maxReceiveCount). Intake keeps no in-progress marker of its own (no idempotency table whose
INPROGRESS item a killed invocation would leave to block the redeliveries until it expires): the record is
the only trace, and the redelivery after the visibility timeout finds it overdue and sends its first step.
One receive is spent, not the five that would dead-letter the lifecycle."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.queues import SqsWorkQueues
from nodecycle.adapters.clock import SystemClock
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.functions.intake.test_intake_function import records
from tests.support.events import happening_now, load_event
from tests.support.functions import LambdaContext
from tests.support.stack import TEMPLATE, Stack, receive_all


class Killed(BaseException):
    """The invocation's end, mid-call (Lambda's timeout: nothing in the handler catches it): no handler code runs
    after it, no partial batch response."""


@pytest.fixture
def intake_queue(stack: Stack) -> tuple[str, str, int, int]:
    """The stack's intake queue with the template's visibility timeout and redrive policy: its url, its
    dead-letter queue's, the visibility timeout and maxReceiveCount."""
    properties = load_template(TEMPLATE)["Resources"]["IntakeQueue"]["Properties"]
    visibility, receives = properties["VisibilityTimeout"], properties["RedrivePolicy"]["maxReceiveCount"]
    sqs = boto3.client("sqs")
    dead = sqs.create_queue(QueueName="nodecycle-intake-dead-letters")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.set_queue_attributes(
        QueueUrl=stack.intake_queue,
        Attributes={
            "VisibilityTimeout": str(visibility),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": str(receives)}),
        },
    )
    return stack.intake_queue, dead, visibility, receives


def received(queue: str) -> dict[str, Any] | None:
    """The next message of ``queue`` as Lambda's poller takes it in (its system attributes: receive count, first
    receive): the SQS event of a batch of one; None when none is visible."""
    messages = boto3.client("sqs").receive_message(
        QueueUrl=queue, MaxNumberOfMessages=1, MessageSystemAttributeNames=["All"]
    )
    return (
        {
            "Records": [
                {
                    "messageId": message["MessageId"],
                    "receiptHandle": message["ReceiptHandle"],
                    "body": message["Body"],
                    "attributes": message["Attributes"],
                    "eventSource": "aws:sqs",
                }
                for message in messages.get("Messages", [])
            ]
        }
        if messages.get("Messages")
        else None
    )


def receive(queue: str) -> dict[str, Any]:
    """One message of ``queue`` as Lambda's poller takes it in: the SQS event of a batch of one."""
    batch = received(queue)
    assert batch is not None, "no message visible"
    return batch


def test_an_invocation_killed_between_a_record_and_its_first_message_is_finished_by_one_redelivery(
    intake_fn: ModuleType,
    stack: Stack,
    intake_queue: tuple[str, str, int, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    queue, dead, visibility, receives = intake_queue
    sqs = boto3.client("sqs")
    # Given a terminate hook's notification on the intake queue, and an invocation that takes it in and is
    # killed once the lifecycle's record is written, as it sends the first step
    body = happening_now(load_event("sqs-hook-terminate.json"))["Records"][0]["body"]
    sqs.send_message(QueueUrl=queue, MessageBody=body)
    send = SqsWorkQueues.send

    def killed(*args: Any, **kwargs: Any) -> None:
        raise Killed

    monkeypatch.setattr(SqsWorkQueues, "send", killed)
    first = receive(queue)
    with pytest.raises(Killed):
        intake_fn.handler(first, LambdaContext())
    (record,) = records()
    assert receive_all(stack.drain_queue) == []

    # When the visibility timeout runs out (the message shows again: SQS deletes nothing of a killed
    # invocation) and the queue delivers it again, to an invocation that lives
    monkeypatch.setattr(SqsWorkQueues, "send", send)
    later = datetime.now(UTC) + timedelta(seconds=visibility)
    monkeypatch.setattr(SystemClock, "now", lambda self: later)
    handle = first["Records"][0]["receiptHandle"]
    sqs.change_message_visibility(QueueUrl=queue, ReceiptHandle=handle, VisibilityTimeout=0)  # (its timeout)
    redelivery = receive(queue)
    count = int(redelivery["Records"][0]["attributes"]["ApproximateReceiveCount"])
    response = intake_fn.handler(redelivery, LambdaContext())

    # Then that delivery succeeds (Lambda deletes it) with the lifecycle's first step sent, on the second of
    # the maxReceiveCount receives: nothing in the way of it, nothing in the dead-letter queue
    assert response == {"batchItemFailures": []}
    assert count == 2 < receives
    sent = [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)]
    assert sent == [{"record_id": record["id"], "seq": 0, "step": "acquire-slot"}]  # (the step, not a watch)
    assert receive_all(dead) == []
