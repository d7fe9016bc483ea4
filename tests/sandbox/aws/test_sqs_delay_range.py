"""SendMessage's ``DelaySeconds`` held to SQS's range, 0 to 900 (the SQS API reference, SendMessage), where moto
refused only the delays past 900 and sent a message with a negative delay at once."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import sqs_attributes


@pytest.fixture
def sqs() -> Iterator[Any]:
    sqs_attributes.install()
    with mock_aws():
        yield boto3.client("sqs", region_name="eu-west-1")


def _held(sqs: Any, url: str) -> int:
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesDelayed"]
    )


@pytest.mark.parametrize("delay", [-1, -900])
def test_a_negative_delay_is_refused_and_nothing_is_sent(sqs: Any, delay: int) -> None:
    url = sqs.create_queue(QueueName="work")["QueueUrl"]

    with pytest.raises(sqs.exceptions.ClientError) as refused:
        sqs.send_message(QueueUrl=url, MessageBody="{}", DelaySeconds=delay)

    error = refused.value.response["Error"]
    assert error["Code"] == "InvalidParameterValue"
    assert f"Value {delay} for parameter DelaySeconds is invalid" in error["Message"]
    assert _held(sqs, url) == 0


def test_a_batchs_entry_with_a_negative_delay_fails_alone(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="work")["QueueUrl"]

    sent = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "late", "MessageBody": "{}", "DelaySeconds": -1},
            {"Id": "now", "MessageBody": "{}", "DelaySeconds": 0},
            {"Id": "longest", "MessageBody": "{}", "DelaySeconds": 900},
        ],
    )

    assert sorted(entry["Id"] for entry in sent["Successful"]) == ["longest", "now"]
    ((failed),) = sent["Failed"]
    assert (failed["Id"], failed["Code"], failed["SenderFault"]) == ("late", "InvalidParameterValue", True)
    assert _held(sqs, url) == 2
