"""SQS deletes a message only by the receipt handle of its latest receive: a delete by an older one succeeds and
deletes nothing (SQS API reference, DeleteMessage). moto deleted it by any handle it had ever had, so the end
of an invocation that outlasted its batch's visibility timeout deleted the message another poller was working
on, and a failure of that second delivery could not bring it back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws.install import install

REGION = "eu-west-1"


@pytest.fixture
def queue() -> Iterator[tuple[Any, str]]:
    install()
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        url = sqs.create_queue(QueueName="work", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
        yield sqs, url


def receive(sqs: Any, url: str) -> dict[str, Any]:
    (message,) = sqs.receive_message(
        QueueUrl=url, MessageSystemAttributeNames=["ApproximateReceiveCount"], VisibilityTimeout=0
    )["Messages"]
    return dict(message)


def test_a_delete_by_an_older_receipt_handle_succeeds_and_deletes_nothing(queue: tuple[Any, str]) -> None:
    sqs, url = queue
    sqs.send_message(QueueUrl=url, MessageBody="step")
    # Given a message received once, then again by another consumer once its visibility ran out
    first = receive(sqs, url)
    second = receive(sqs, url)
    assert first["ReceiptHandle"] != second["ReceiptHandle"]

    # When the first consumer deletes it with its own (older) handle, alone and in a batch
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    batch = sqs.delete_message_batch(
        QueueUrl=url, Entries=[{"Id": "0", "ReceiptHandle": first["ReceiptHandle"]}]
    )

    # Then both succeed, and the message is still there: it comes back (its receives counted)
    assert [entry["Id"] for entry in batch["Successful"]] == ["0"]
    assert batch.get("Failed", []) == []
    third = receive(sqs, url)
    assert third["Attributes"]["ApproximateReceiveCount"] == "3"

    # And its latest handle deletes it; after that any of its handles may delete it again, as SQS allows
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []


def test_a_duplicate_delivery_is_a_receive_of_its_own_with_a_new_handle(queue: tuple[Any, str]) -> None:
    from nodecycle_sandbox.aws.sqs_receipts import (
        RECEIPT_HANDLE_HEADER,
        RECEIVE_AGAIN_HEADER,
        RECEIVE_COUNT_HEADER,
    )

    sqs, url = queue
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "30"})
    sqs.send_message(QueueUrl=url, MessageBody="step")
    (first,) = sqs.receive_message(QueueUrl=url)["Messages"]

    # When the message is received again (the runner's sqs-duplicate fault) while the first receive holds it
    def ask_again(request: Any, **_: Any) -> None:
        request.headers[RECEIVE_AGAIN_HEADER] = "1"

    sqs.meta.events.register("before-sign.sqs.ChangeMessageVisibility", ask_again)
    answer = sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=30
    )
    sqs.meta.events.unregister("before-sign.sqs.ChangeMessageVisibility", ask_again)
    headers = answer["ResponseMetadata"]["HTTPHeaders"]

    # Then it has a new handle and a second receive, and stays invisible (no third consumer gets it now)
    again = headers[RECEIPT_HANDLE_HEADER]
    assert again != first["ReceiptHandle"]
    assert headers[RECEIVE_COUNT_HEADER] == "2"
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
    # And the first receive's delete deletes nothing, the second's deletes it
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=again, VisibilityTimeout=0)
    (third,) = sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["ApproximateReceiveCount"])[
        "Messages"
    ]
    assert third["Attributes"]["ApproximateReceiveCount"] == "3"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=third["ReceiptHandle"])
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []
