"""moto's SQS as the sandbox patches it: the retention period is still enforced."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.sqs.models import sqs_backends

from nodecycle_sandbox.aws import sqs_timing

ACCOUNT = "123456789012"


@pytest.fixture
def sqs() -> Iterator[Any]:
    sqs_timing.install()
    with mock_aws():
        yield boto3.client("sqs", region_name="eu-west-1")


def test_a_message_older_than_its_queue_s_retention_period_is_not_received(sqs: Any) -> None:
    # Given a queue that keeps messages a minute, with one message sent two minutes ago and one just now
    url = sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="old")
    queue = sqs_backends[ACCOUNT]["eu-west-1"].get_queue("q")
    (old,) = list(queue._messages)
    old.sent_timestamp = int(time.time() * 1000) - 120_000  # type: ignore[assignment]
    sqs.send_message(QueueUrl=url, MessageBody="new")

    # When the queue is read
    received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1).get(
        "Messages", []
    )

    # Then only the message within the retention period comes back
    assert [m["Body"] for m in received] == ["new"]
