"""``nodecycle doctor``'s check of the stack's dead-letter queues on SQS (moto): one queue it cannot read
does not hide what the others hold."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import RULE_OUTPUTS, Doctor
from nodecycle_cli.doctor.findings import Status, exit_status
from nodecycle_sandbox.runner.cfn_yaml import load_template

REGION = "eu-west-1"
TEMPLATE = load_template(Path(__file__).resolve().parents[2] / "template.yaml")
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
    assert gone.fix.startswith("aws sqs create-queue --queue-name nodecycle-intake-dlq ")
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


def run_aws_fix(session: boto3.Session, fix: str) -> None:
    """The ``aws sqs create-queue ...`` command a finding gives, as the AWS CLI runs it: split as the shell
    splits it, its ``--attributes`` the JSON map the CLI sends as the call's Attributes."""
    words = shlex.split(fix.split(" (", 1)[0] if fix.startswith("aws ") else fix)
    assert words[:3] == ["aws", "sqs", "create-queue"], fix
    parser = argparse.ArgumentParser()
    parser.add_argument("--queue-name", required=True)
    parser.add_argument("--attributes", type=json.loads, default={})
    parser.add_argument("--region", required=True)
    given = parser.parse_args(words[3:])
    assert given.region == session.region_name
    session.client("sqs").create_queue(QueueName=given.queue_name, Attributes=given.attributes)


def template_dead_letter_queue(name: str) -> dict[str, str]:
    """The attributes the template gives a dead-letter queue, as SQS answers them (strings)."""
    properties = TEMPLATE["Resources"][name]["Properties"]
    return {
        key: str(value).lower() if isinstance(value, bool) else str(value)
        for key, value in properties.items()
    }


@pytest.mark.parametrize("what", QUEUES)
def test_the_fix_of_a_dead_letter_queue_deleted_outside_the_stack_recreates_it(
    session: boto3.Session, what: str
) -> None:
    # Given a stack's dead-letter queues as the template makes them (the intake and sweeper ones with the policy
    # that lets EventBridge write to them), a work queue redriving to each, and one of them deleted by hand
    sqs: Any = session.client("sqs")
    account = "123456789012"
    rules = {output: f"nodecycle-{output.lower()}-AbC123" for _, output in RULE_OUTPUTS}
    urls = {
        w: sqs.create_queue(QueueName=f"nodecycle-{w.capitalize()}DeadLetterQueue-X1y2Z3")["QueueUrl"]
        for w in QUEUES
    }
    arn = sqs.get_queue_attributes(QueueUrl=urls[what], AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sqs.create_queue(
        QueueName="nodecycle-work",
        Attributes={"RedrivePolicy": json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 5})},
    )
    sqs.delete_queue(QueueUrl=urls[what])
    described = {
        "StackName": "nodecycle",
        "Outputs": [
            *(
                {"OutputKey": f"{w.capitalize()}DeadLetterQueueUrl", "OutputValue": url}
                for w, url in urls.items()
            ),
            *({"OutputKey": output, "OutputValue": name} for output, name in rules.items()),
        ],
    }
    args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)
    doctor = Doctor(args, session, from_description(described, REGION))
    (gone,) = [f for f in doctor.examine() if f.check == f"queues.dead-letters.{what}"]
    assert gone.status is Status.PROBLEM

    # When the operator runs the fix it gives
    run_aws_fix(session, gone.fix)

    # Then the queue is back under its URL and ARN (what the work queues redrive to, the functions' on-failure
    # destinations and EventBridge's dead-letter configs name, and its alarm watches), as the template makes it
    attributes = sqs.get_queue_attributes(QueueUrl=urls[what], AttributeNames=["All"])["Attributes"]
    assert attributes["QueueArn"] == arn
    expected = template_dead_letter_queue(f"{what.capitalize()}DeadLetterQueue")
    assert {key: attributes.get(key) for key in expected} == expected
    # with the EventBridge policy of the template's for the two queues EventBridge writes to
    policies = {"intake": "IntakeDeadLetterQueuePolicy", "sweeper": "SweeperDeadLetterQueuePolicy"}
    if what in policies:
        (statement,) = json.loads(attributes["Policy"])["Statement"]
        (template_statement,) = TEMPLATE["Resources"][policies[what]]["Properties"]["PolicyDocument"][
            "Statement"
        ]
        assert statement["Principal"] == template_statement["Principal"]
        assert (statement["Effect"], statement["Action"], statement["Resource"]) == (
            "Allow",
            "sqs:SendMessage",
            arn,
        )
        sources = statement["Condition"]["ArnEquals"]["aws:SourceArn"]
        named = {
            "intake": ("LifecycleRuleName", "DisruptionRuleName", "MaintenanceRuleName"),
            "sweeper": ("SweepRuleName",),
        }[what]
        assert sorted([sources] if isinstance(sources, str) else sources) == sorted(
            f"arn:aws:events:{REGION}:{account}:rule/{rules[output]}" for output in named
        )
    else:
        assert "Policy" not in attributes
    # and the doctor finds it again, empty
    (back,) = [f for f in doctor.examine() if f.check == f"queues.dead-letters.{what}"]
    assert back.status is Status.OK
    # (what it no longer says: `sam deploy` does not recreate a resource deleted outside the stack, CloudFormation
    # does not notice it: docs/runbook.md)
    assert "sam deploy" not in gone.fix
