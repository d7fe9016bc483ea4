"""SQS's limit on a message's visibility timeout: 12 hours in all from its receive. A ChangeMessageVisibility may
extend it within what is left of those 12 hours, counted from the receive the handle is of (the SQS API reference,
ChangeMessageVisibility: "if you attempt to set the VisibilityTimeout to a value greater than the maximum time left,
Amazon SQS returns an error"; its example: 30 minutes, extended by 2 hours, leaves 9 h 30 min). moto counted the 12
hours from the message's sending: a message that sat in its queue for hours (a stalled consumer, a dead-letter
queue redriven) had its visibility change refused at its receive, where SQS takes it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
import time_machine
from moto import mock_aws

from nodecycle_sandbox.aws import sqs_attributes, sqs_timing

HOUR = 3600


@pytest.fixture
def sqs() -> Iterator[Any]:
    sqs_timing.install()
    sqs_attributes.install()
    with mock_aws():
        yield boto3.client("sqs", region_name="eu-west-1")


def test_the_12_hours_of_a_visibility_run_from_the_receive_not_the_sending(sqs: Any) -> None:
    # Given a message that waited 11 hours in its queue before it was received
    url = sqs.create_queue(QueueName="q", Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    with time_machine.travel(time.time(), tick=True) as clock:
        sqs.send_message(QueueUrl=url, MessageBody="x")
        clock.shift(11 * HOUR)
        (message,) = sqs.receive_message(QueueUrl=url)["Messages"]
        handle = message["ReceiptHandle"]

        # When its consumer extends its visibility by 2 hours, Then SQS takes it (before: moto refused it, 13 hours
        # after its sending)
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=2 * HOUR)

        # And an hour on, 11 hours more is past the 12 hours from its receive: refused, as SQS refuses it
        clock.shift(HOUR)
        with pytest.raises(sqs.exceptions.ClientError) as refused:
            sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=11 * HOUR)
        assert refused.value.response["Error"]["Code"] == "InvalidParameterValue"
        # ...while what is left of them is taken
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=11 * HOUR - 60)
