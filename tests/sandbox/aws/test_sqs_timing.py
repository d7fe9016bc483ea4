"""moto's SQS as the sandbox patches it: the retention period is still enforced, and concurrent requests are
answered as SQS answers them."""

from __future__ import annotations

import threading
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


def test_concurrent_receivers_each_get_a_message_once_and_delete_it(sqs: Any) -> None:
    # Given a queue that six threads of one process send to, receive from and delete from at once, as the
    # sandbox's server threads do (moto's own receive walked its pending messages while other threads changed
    # them: two receivers got one message, or "Set changed size during iteration" answered a 500)
    sqs.create_queue(QueueName="busy")
    backend = sqs_backends[ACCOUNT]["eu-west-1"]
    failures: list[str] = []
    received: list[str] = []

    def work() -> None:
        for _ in range(300):
            try:
                for _ in range(3):
                    backend.send_message("busy", "x")
                messages = backend.receive_message("busy", 10, 0, 30)
                received.extend(message.id for message in messages)
                for message in messages:
                    backend.delete_message("busy", str(message.receipt_handle))
            except Exception as error:  # any failure is the finding
                failures.append(f"{type(error).__name__}: {error}")

    # When they all run
    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then no request failed and no message was received twice
    assert failures == []
    assert len(received) == len(set(received))
