"""What a dead-letter redrive (StartMessageMoveTask) makes of a message, as SQS documents it: "All redriven messages
are considered new messages with a new messageID and enqueueTime" and "the redrive task resets the retention
period" (SQS developer guide, dead-letter queue redrive). So its receive count starts again (a message redriven
after maxReceiveCount failures gets the whole count again before it is dead-lettered anew), its SentTimestamp is
the move's, and its body and message attributes are what the dead-letter queue held."""

from __future__ import annotations

import json
import time
from typing import Any

# (moto with the sandbox's additions, in process, and a queue's ARN: the redrive command's tests' own)
from tests.integration.cli.test_sandbox_redrive import arn
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
