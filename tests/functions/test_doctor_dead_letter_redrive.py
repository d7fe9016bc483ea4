"""The doctor's finding for messages in a dead-letter queue gave as its fix a command that reads them (``aws sqs
receive-message``): run, the doctor found the same problem again. It now also gives what empties the queue once the
cause is fixed, as the queue's runbook entry says: the intake queue's redriven to the intake queue (what EventBridge
and Lambda wrote there came from no queue), the sweeper's purged (the next sweep is their retry). The stack is the
sandbox's deployment of template.yaml, its SQS with the sandbox's StartMessageMoveTask; the fix is run as given."""

from __future__ import annotations

import json
import shlex
import time
from typing import Any

import boto3

from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Finding, Status
from nodecycle_sandbox.aws import sqs_move_tasks

from .test_doctor_rule_dead_letters import deployed

__all__ = ["deployed"]

EVENT = {"id": "e-1", "source": "aws.autoscaling", "detail-type": "EC2 Instance-terminate Lifecycle Action"}


def finding(doctor: Doctor, what: str) -> Finding:
    (found,) = [f for f in doctor.examine() if f.check == f"queues.dead-letters.{what}"]
    return found


def run_fix(sqs: Any, fix: str) -> None:
    """The command after 'once the cause is fixed: ', as the shell would run it."""
    words = shlex.split(fix.split("once the cause is fixed: ", 1)[1].split(" (", 1)[0])
    options = dict(zip(words[3::2], words[4::2], strict=True))
    if words[:3] == ["aws", "sqs", "start-message-move-task"]:
        sqs.start_message_move_task(
            SourceArn=options["--source-arn"],
            **({"DestinationArn": options["--destination-arn"]} if "--destination-arn" in options else {}),
        )
        # (SQS moves them in the background: waited for, as the runbook says)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            (task,) = sqs.list_message_move_tasks(SourceArn=options["--source-arn"])["Results"]
            if task["Status"] != "RUNNING":
                break
            time.sleep(0.02)
    else:
        assert words[:3] == ["aws", "sqs", "purge-queue"], fix
        sqs.purge_queue(QueueUrl=options["--queue-url"])


def test_what_eventbridge_left_in_the_intake_dead_letter_queue_is_redriven_by_the_fix(
    deployed: tuple[Doctor, Any],
) -> None:
    sqs_move_tasks.install()
    doctor, _ = deployed
    sqs: Any = boto3.client("sqs", region_name="eu-west-1")
    outputs = doctor._deployment.outputs  # type: ignore[union-attr]
    sqs.send_message(
        QueueUrl=outputs["IntakeDeadLetterQueueUrl"],
        MessageBody=json.dumps(EVENT),
        MessageAttributes={"ERROR_CODE": {"DataType": "String", "StringValue": "NO_PERMISSIONS"}},
    )

    problem = finding(doctor, "intake")
    assert problem.status is Status.PROBLEM
    assert problem.fix.startswith(
        f"aws sqs receive-message --queue-url {outputs['IntakeDeadLetterQueueUrl']}"
    )
    assert f"--destination-arn {outputs['IntakeQueueArn']}" in problem.fix

    run_fix(sqs, problem.fix)

    assert finding(doctor, "intake").status is Status.OK
    (moved,) = sqs.receive_message(QueueUrl=outputs["IntakeQueueUrl"])["Messages"]
    assert json.loads(moved["Body"]) == EVENT


def test_the_sweepers_dead_letters_are_purged_by_the_fix(deployed: tuple[Doctor, Any]) -> None:
    doctor, _ = deployed
    sqs: Any = boto3.client("sqs", region_name="eu-west-1")
    url = doctor._deployment.outputs["SweeperDeadLetterQueueUrl"]  # type: ignore[union-attr]
    sqs.send_message(
        QueueUrl=url, MessageBody=json.dumps({"requestContext": {"condition": "RetriesExhausted"}})
    )

    problem = finding(doctor, "sweeper")
    assert problem.status is Status.PROBLEM
    assert f"aws sqs purge-queue --queue-url {url}" in problem.fix

    run_fix(sqs, problem.fix)

    assert finding(doctor, "sweeper").status is Status.OK


def test_a_redrive_under_way_is_reported_and_not_started_again(deployed: tuple[Doctor, Any]) -> None:
    """SQS moves a dead-letter queue's messages in the background (StartMessageMoveTask answers at once, the task
    RUNNING) and refuses a second task of the same queue while one runs. The doctor, run while its own fix ran,
    found the messages still there and gave the same fix again: run, SQS refused it."""
    sqs_move_tasks.install()
    doctor, _ = deployed
    sqs: Any = boto3.client("sqs", region_name="eu-west-1")
    outputs = doctor._deployment.outputs  # type: ignore[union-attr]
    url = outputs["IntakeDeadLetterQueueUrl"]
    # (ten: the redrive still runs when the doctor, however slow, reads the queue)
    for n in range(10):
        sqs.send_message(QueueUrl=url, MessageBody=json.dumps({**EVENT, "id": f"e-{n}"}))
    source = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    # Given the intake dead-letter queue's redrive under way (slowly: one message a second)
    handle = sqs.start_message_move_task(
        SourceArn=source, DestinationArn=outputs["IntakeQueueArn"], MaxNumberOfMessagesPerSecond=1
    )["TaskHandle"]

    found = finding(doctor, "intake")

    # Then the doctor says it runs and how far it is, and its fix waits for it (or stops it) rather than
    # starting the redrive SQS refuses now
    assert found.status is Status.WARNING, found
    assert "a redrive of them is running" in found.what
    assert "start-message-move-task" not in found.fix
    assert f"aws sqs list-message-move-tasks --source-arn {source}" in found.fix
    assert f"aws sqs cancel-message-move-task --task-handle {handle}" in found.fix
    sqs.cancel_message_move_task(TaskHandle=handle)
