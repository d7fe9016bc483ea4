"""``nodecycle doctor``'s check of the stack's dead-letter queues on SQS (moto): one queue it cannot read
does not hide what the others hold."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Status, exit_status

REGION = "eu-west-1"
QUEUES = ("intake", "drain", "eip", "sweeper")


@pytest.fixture
def session() -> Iterator[boto3.Session]:
    with mock_aws():
        yield boto3.Session(region_name=REGION)


def test_a_dead_letter_queue_that_cannot_be_read_does_not_hide_the_messages_of_another(
    session: boto3.Session,
) -> None:
    # Given a stack whose intake dead-letter queue was deleted outside CloudFormation, and whose drain
    # dead-letter queue holds 2 messages
    sqs = session.client("sqs")
    urls = {what: sqs.create_queue(QueueName=f"nodecycle-{what}-dlq")["QueueUrl"] for what in QUEUES}
    sqs.delete_queue(QueueUrl=urls["intake"])
    for _ in range(2):
        sqs.send_message(QueueUrl=urls["drain"], MessageBody='{"record_id": "x", "seq": 0, "step": "evict"}')
    described = {
        "StackName": "nodecycle",
        "Outputs": [
            {"OutputKey": f"{what.capitalize()}DeadLetterQueueUrl", "OutputValue": url}
            for what, url in urls.items()
        ],
    }
    args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)

    # When the doctor examines it
    findings = [
        f
        for f in Doctor(args, session, from_description(described, REGION)).examine()
        if f.check.startswith("queues.dead-letters")
    ]

    # Then the drain queue's messages are a problem (exit status 1, not 3: "nothing wrong found"), and so is the
    # intake queue that is gone (not a check that could not be made: failed intake events have nowhere to go)
    by_check = {f.check: f for f in findings}
    assert by_check["queues.dead-letters.drain"].what == "2 messages in the drain dead-letter queue"
    gone = by_check["queues.dead-letters.intake"]
    assert (gone.status, gone.what) == (
        Status.PROBLEM,
        f"the intake dead-letter queue {urls['intake']} does not exist",
    )
    assert gone.fix.startswith("sam deploy")
    assert [by_check[f"queues.dead-letters.{what}"].status for what in ("eip", "sweeper")] == [Status.OK] * 2
    assert exit_status(findings) == 1


def test_a_dead_letter_queue_deleted_outside_the_stack_is_a_problem_not_a_check_not_made(
    session: boto3.Session,
) -> None:
    # Given a stack whose dead-letter queues are all empty but the drain one, deleted by hand
    sqs = session.client("sqs")
    urls = {what: sqs.create_queue(QueueName=f"nodecycle-{what}-dlq")["QueueUrl"] for what in QUEUES}
    sqs.delete_queue(QueueUrl=urls["drain"])
    described = {
        "StackName": "nodecycle",
        "Outputs": [
            {"OutputKey": f"{what.capitalize()}DeadLetterQueueUrl", "OutputValue": url}
            for what, url in urls.items()
        ],
    }
    args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)

    # When the doctor examines it
    findings = [
        f
        for f in Doctor(args, session, from_description(described, REGION)).examine()
        if f.check.startswith("queues.dead-letters")
    ]

    # Then the doctor does not exit as if nothing were wrong: the drain work that fails for good is lost
    assert exit_status(findings) == 1
    assert "work that fails for good" in next(f.why for f in findings if f.status is Status.PROBLEM)
