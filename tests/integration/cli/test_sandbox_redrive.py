"""The runbook's redrive of a dead-letter queue, ``aws sqs start-message-move-task``, answered as SQS answers it in
the sandbox (moto raised NotImplementedError): each message back to the queue that moved it there, or all of them
to the destination named, body and message attributes kept; a source that is no queue's dead-letter queue refused;
a message sent there directly (Lambda's on-failure record, EventBridge's undelivered event) has no queue to go back
to without a destination."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_sandbox.aws.install import install

REGION = "eu-west-1"


@pytest.fixture
def sqs() -> Iterator[Any]:
    install()
    with mock_aws():
        yield boto3.client("sqs", region_name=REGION)


def arn(sqs: Any, url: str) -> str:
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def finished(sqs: Any, url: str, timeout: float = 10.0) -> dict[str, Any]:
    """The latest move task of the dead-letter queue at ``url`` once it no longer runs: SQS moves the messages in
    the background, as an operator waits for it (``aws sqs list-message-move-tasks``)."""
    deadline = time.monotonic() + timeout
    while True:
        (task,) = sqs.list_message_move_tasks(SourceArn=arn(sqs, url))["Results"]
        if task["Status"] not in ("RUNNING", "CANCELLING") or time.monotonic() > deadline:
            return dict(task)
        time.sleep(0.02)


def queues(sqs: Any) -> dict[str, str]:
    """A dead-letter queue for two work queues (as the drain and wake queues share theirs), and an intake queue."""
    dead = sqs.create_queue(QueueName="dead")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": arn(sqs, dead), "maxReceiveCount": 1})
    made = {"dead": dead, "intake": sqs.create_queue(QueueName="intake")["QueueUrl"]}
    for name in ("drain", "wake"):
        made[name] = sqs.create_queue(
            QueueName=name, Attributes={"RedrivePolicy": policy, "VisibilityTimeout": "0"}
        )["QueueUrl"]
    return made


def bodies(sqs: Any, url: str) -> list[str]:
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"])
    return sorted(m["Body"] for m in received.get("Messages", []))


def dead_letter(sqs: Any, url: str, body: str) -> None:
    """A message that failed once, past its queue's maxReceiveCount: the next receive moves it."""
    sqs.send_message(QueueUrl=url, MessageBody=body)
    sqs.receive_message(QueueUrl=url)
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []


def test_each_dead_letter_goes_back_to_the_queue_it_came_from(sqs: Any) -> None:
    urls = queues(sqs)
    dead_letter(sqs, urls["drain"], "a drain step")
    dead_letter(sqs, urls["wake"], "a wake-up")

    handle = sqs.start_message_move_task(SourceArn=arn(sqs, urls["dead"]))["TaskHandle"]
    finished(sqs, urls["dead"])

    assert bodies(sqs, urls["drain"]) == ["a drain step"]
    assert bodies(sqs, urls["wake"]) == ["a wake-up"]
    assert bodies(sqs, urls["dead"]) == []
    (task,) = sqs.list_message_move_tasks(SourceArn=arn(sqs, urls["dead"]))["Results"]
    assert (task["TaskHandle"], task["Status"], task["ApproximateNumberOfMessagesMoved"]) == (
        handle,
        "COMPLETED",
        2,
    )


def test_what_eventbridge_left_there_goes_to_the_destination_named_with_its_attributes(sqs: Any) -> None:
    urls = queues(sqs)
    attributes = {"ERROR_CODE": {"DataType": "String", "StringValue": "NO_RESOURCE"}}
    sqs.send_message(QueueUrl=urls["dead"], MessageBody='{"id": "e-1"}', MessageAttributes=attributes)

    sqs.start_message_move_task(SourceArn=arn(sqs, urls["dead"]), DestinationArn=arn(sqs, urls["intake"]))
    finished(sqs, urls["dead"])

    (moved,) = sqs.receive_message(QueueUrl=urls["intake"], MessageAttributeNames=["All"])["Messages"]
    assert moved["Body"] == '{"id": "e-1"}'
    assert moved["MessageAttributes"]["ERROR_CODE"]["StringValue"] == "NO_RESOURCE"
    assert bodies(sqs, urls["dead"]) == []


def test_a_message_sent_there_directly_has_no_queue_to_go_back_to(sqs: Any) -> None:
    urls = queues(sqs)
    sqs.send_message(QueueUrl=urls["dead"], MessageBody="an on-failure record")

    sqs.start_message_move_task(SourceArn=arn(sqs, urls["dead"]))

    task = finished(sqs, urls["dead"])
    assert task["Status"] == "FAILED"
    assert "DestinationArn" in task["FailureReason"]
    assert bodies(sqs, urls["dead"]) == ["an on-failure record"]


def test_a_queue_that_is_no_dead_letter_queue_is_refused_as_a_source(sqs: Any) -> None:
    urls = queues(sqs)
    with pytest.raises(ClientError) as refused:
        sqs.start_message_move_task(
            SourceArn=arn(sqs, urls["intake"]), DestinationArn=arn(sqs, urls["drain"])
        )
    assert refused.value.response["Error"]["Code"] in (
        "InvalidParameterValue",
        "InvalidParameterValueException",
    )
