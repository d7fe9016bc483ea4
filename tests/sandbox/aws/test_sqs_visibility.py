"""moto's SQS as the sandbox patches it: ChangeMessageVisibility as SQS answers it (the SQS API reference,
ChangeMessageVisibility): a message in flight, by the receipt handle of its latest receive, to 0 to 43,200
seconds. moto changed it by any handle the message ever had, for a message no longer in flight too, and took a
negative timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import sqs_attributes, sqs_timing


@pytest.fixture
def sqs() -> Iterator[Any]:
    sqs_timing.install()
    sqs_attributes.install()
    with mock_aws():
        yield boto3.client("sqs", region_name="eu-west-1")


def received(sqs: Any, url: str) -> str:
    (message,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"]
    return str(message["ReceiptHandle"])


def code(sqs: Any, **kwargs: Any) -> str:
    with pytest.raises(sqs.exceptions.ClientError) as refused:
        sqs.change_message_visibility(**kwargs)
    return str(refused.value.response["Error"]["Code"])


def test_a_visibility_is_changed_by_the_latest_handle_of_a_message_in_flight_only(sqs: Any) -> None:
    # Given a message received twice (its first receive's timeout cut short), in flight by its second handle
    url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "180"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="x")
    first = received(sqs, url)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first, VisibilityTimeout=0)
    latest = received(sqs, url)

    # When the first handle shortens its visibility, Then SQS refuses it as expired, and the message stays
    # invisible (before: moto changed it by the old handle, and the message showed at once)
    assert code(sqs, QueueUrl=url, ReceiptHandle=first, VisibilityTimeout=0) == "InvalidParameterValue"
    assert sqs.receive_message(QueueUrl=url).get("Messages", []) == []

    # And a timeout out of SQS's range is refused (before: moto took -1), at either end
    assert code(sqs, QueueUrl=url, ReceiptHandle=latest, VisibilityTimeout=-1) == "InvalidParameterValue"
    assert code(sqs, QueueUrl=url, ReceiptHandle=latest, VisibilityTimeout=43_201) == "InvalidParameterValue"

    # And the latest handle changes it (0: visible at once), after which the message is no longer in flight:
    # a change by that handle is refused (before: moto changed it)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=latest, VisibilityTimeout=0)
    time.sleep(0.002)  # (moto's visibility is to the millisecond)
    # (the code as botocore reads SQS's: its query-compatible name, that of sqs.exceptions.MessageNotInflight)
    not_in_flight = code(sqs, QueueUrl=url, ReceiptHandle=latest, VisibilityTimeout=10)
    assert not_in_flight == "AWS.SimpleQueueService.MessageNotInflight"
    assert (
        code(sqs, QueueUrl=url, ReceiptHandle="never-given", VisibilityTimeout=10) == "ReceiptHandleIsInvalid"
    )
    assert len(sqs.receive_message(QueueUrl=url)["Messages"]) == 1


def test_a_batch_of_changes_answers_each_entry_alone(sqs: Any) -> None:
    # Given two messages in flight, one of which was received again since its first handle
    url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "180"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="a")
    sqs.send_message(QueueUrl=url, MessageBody="b")
    one, other = received(sqs, url), received(sqs, url)
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=other, VisibilityTimeout=0)
    received(sqs, url)

    # When a batch changes both by the handles first given, Then the one is changed and the other refused alone
    answer = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "one", "ReceiptHandle": one, "VisibilityTimeout": 60},
            {"Id": "other", "ReceiptHandle": other, "VisibilityTimeout": 60},
        ],
    )
    assert [entry["Id"] for entry in answer["Successful"]] == ["one"]
    assert [(entry["Id"], entry["Code"]) for entry in answer["Failed"]] == [
        ("other", "InvalidParameterValue")
    ]
