"""What a dead-letter redrive (StartMessageMoveTask) makes of a message, as SQS documents it: "All redriven messages
are considered new messages with a new messageID and enqueueTime" and "the redrive task resets the retention
period" (SQS developer guide, dead-letter queue redrive). So its receive count starts again (a message redriven
after maxReceiveCount failures gets the whole count again before it is dead-lettered anew), its SentTimestamp is
the move's, and its body and message attributes are what the dead-letter queue held."""

from __future__ import annotations

import json
import time
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_sandbox.aws.install import install

# (moto with the sandbox's additions, in process, and a queue's ARN: the redrive command's tests' own)
from tests.integration.cli.test_sandbox_redrive import arn, finished
from tests.integration.cli.test_sandbox_redrive import sqs as sqs


def test_a_redriven_message_is_a_new_message_with_its_body_and_attributes(sqs: Any) -> None:
    dead = sqs.create_queue(QueueName="dead")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": arn(sqs, dead), "maxReceiveCount": 2})
    work = sqs.create_queue(QueueName="work", Attributes={"RedrivePolicy": policy, "VisibilityTimeout": "0"})[
        "QueueUrl"
    ]
    attributes = {"kind": {"DataType": "String", "StringValue": "drain-step"}}
    sent = sqs.send_message(QueueUrl=work, MessageBody="step", MessageAttributes=attributes)["MessageId"]
    # Given a message that failed its two receives and was dead-lettered by the third
    for _ in range(2):
        assert sqs.receive_message(QueueUrl=work)["Messages"]
    assert sqs.receive_message(QueueUrl=work).get("Messages", []) == []
    (dead_letter,) = sqs.receive_message(
        QueueUrl=dead, VisibilityTimeout=0, MessageSystemAttributeNames=["All"]
    )["Messages"]
    moved_at = int(time.time() * 1000)

    # When the dead-letter queue is redriven to where it came from
    sqs.start_message_move_task(SourceArn=arn(sqs, dead))
    finished(sqs, dead)

    # Then it is a new message there: a new id, sent at the move, never received before, with its body and
    # message attributes
    (redriven,) = sqs.receive_message(
        QueueUrl=work, MessageSystemAttributeNames=["All"], MessageAttributeNames=["All"], VisibilityTimeout=0
    )["Messages"]
    assert redriven["MessageId"] not in (sent, dead_letter["MessageId"])
    assert (
        int(redriven["Attributes"]["SentTimestamp"])
        >= moved_at
        >= int(dead_letter["Attributes"]["SentTimestamp"])
    )
    assert redriven["Attributes"]["ApproximateReceiveCount"] == "1"
    assert (redriven["Body"], redriven["MessageAttributes"]["kind"]["StringValue"]) == ("step", "drain-step")


MESSAGES = 6  # at one a second: still running when the test, however slow, looks


def test_a_redrive_runs_in_the_background_one_at_a_time_per_queue_and_can_be_cancelled(sqs: Any) -> None:
    """StartMessageMoveTask "starts an asynchronous task"; "only one active message movement task is supported per
    queue at any given time"; a cancelled task "does not revert the messages that have already been moved" (SQS
    API reference). The sandbox's moved every message before it answered."""
    dead = sqs.create_queue(QueueName="dead")["QueueUrl"]
    policy = json.dumps({"deadLetterTargetArn": arn(sqs, dead), "maxReceiveCount": 1})
    sqs.create_queue(QueueName="work", Attributes={"RedrivePolicy": policy})
    intake = sqs.create_queue(QueueName="intake")["QueueUrl"]
    for n in range(MESSAGES):
        sqs.send_message(QueueUrl=dead, MessageBody=f"record {n}")
    source = arn(sqs, dead)

    # When a redrive is started at one message a second
    handle = sqs.start_message_move_task(
        SourceArn=source, DestinationArn=arn(sqs, intake), MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]

    # Then it runs, not done yet: its messages mostly still in the dead-letter queue
    (task,) = sqs.list_message_move_tasks(SourceArn=source)["Results"]
    assert (task["TaskHandle"], task["Status"], task["ApproximateNumberOfMessagesToMove"]) == (
        handle,
        "RUNNING",
        MESSAGES,
    )
    assert task["ApproximateNumberOfMessagesMoved"] < MESSAGES
    assert task["MaxNumberOfMessagesPerSecond"] == 1
    # and a second one of the same queue is refused while it runs
    with pytest.raises(ClientError) as refused:
        sqs.start_message_move_task(SourceArn=source, DestinationArn=arn(sqs, intake))
    assert refused.value.response["Error"]["Code"] in (
        "InvalidParameterValue",
        "InvalidParameterValueException",
    )

    # When it is cancelled: what moved stays moved, the rest stays in the dead-letter queue
    sqs.cancel_message_move_task(TaskHandle=handle)
    task = finished(sqs, dead)
    assert task["Status"] == "CANCELLED"
    left = sqs.get_queue_attributes(QueueUrl=dead, AttributeNames=["ApproximateNumberOfMessages"])[
        "Attributes"
    ]
    assert int(left["ApproximateNumberOfMessages"]) == MESSAGES - task["ApproximateNumberOfMessagesMoved"] > 0
    # A task no longer running cannot be cancelled; a new one may start
    with pytest.raises(ClientError):
        sqs.cancel_message_move_task(TaskHandle=handle)
    sqs.start_message_move_task(SourceArn=source, DestinationArn=arn(sqs, intake))
    assert finished(sqs, dead)["Status"] == "COMPLETED"
    assert (
        int(
            sqs.get_queue_attributes(QueueUrl=intake, AttributeNames=["ApproximateNumberOfMessages"])[
                "Attributes"
            ]["ApproximateNumberOfMessages"]
        )
        == MESSAGES
    )


def test_a_redrive_left_running_by_a_reset_sandbox_blocks_no_redrive_of_the_next() -> None:
    """(The sandbox's own hygiene: each test's moto starts afresh, its queues' tasks with it.)"""
    install()
    for _ in range(2):
        with mock_aws():
            sqs = boto3.client("sqs", region_name="eu-west-1")
            dead = sqs.create_queue(QueueName="dead")["QueueUrl"]
            policy = json.dumps({"deadLetterTargetArn": arn(sqs, dead), "maxReceiveCount": 1})
            intake = sqs.create_queue(QueueName="intake", Attributes={"RedrivePolicy": policy})["QueueUrl"]
            for n in range(3):
                sqs.send_message(QueueUrl=dead, MessageBody=f"record {n}")
            # (slow: still running when the context ends)
            sqs.start_message_move_task(
                SourceArn=arn(sqs, dead), DestinationArn=arn(sqs, intake), MaxNumberOfMessagesPerSecond=1
            )
