"""The intake and sweeper dead-letter queues take what EventBridge could not deliver to their functions, and only
because their queue policy lets the stack's rules write there (the template's IntakeDeadLetterQueuePolicy and
SweeperDeadLetterQueuePolicy). A policy removed or narrowed by hand is silent: EventBridge drops what it cannot
write (AWS/Events InvocationsFailedToBeSentToDlq), the queue stays empty, its alarm quiet. The doctor must say so,
with the command that puts the policy back (run here as the AWS CLI runs it)."""

from __future__ import annotations

import argparse
import json
import shlex
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Status
from tests.functions.test_doctor_dead_letters import REGION

RULES = {
    "LifecycleRuleName": "nodecycle-IntakeFunctionLifecycleActions-A1",
    "DisruptionRuleName": "nodecycle-IntakeFunctionEc2Disruptions-B2",
    "MaintenanceRuleName": "nodecycle-IntakeFunctionScheduledMaintenance-C3",
    "SweepRuleName": "nodecycle-SweeperFunctionSweep-D4",
}


def rule_arn(output: str) -> str:
    return f"arn:aws:events:{REGION}:123456789012:rule/{RULES[output]}"


@pytest.fixture
def stack() -> Iterator[tuple[Doctor, Any, dict[str, str]]]:
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        sqs: Any = session.client("sqs")
        urls = {
            w: sqs.create_queue(QueueName=f"nodecycle-{w.capitalize()}DeadLetterQueue-X1")["QueueUrl"]
            for w in ("intake", "drain", "eip", "sweeper")
        }
        described = {
            "StackName": "nodecycle",
            "Outputs": [
                *(
                    {"OutputKey": f"{w.capitalize()}DeadLetterQueueUrl", "OutputValue": url}
                    for w, url in urls.items()
                ),
                *({"OutputKey": output, "OutputValue": name} for output, name in RULES.items()),
            ],
        }
        args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)
        yield Doctor(args, session, from_description(described, REGION)), sqs, urls


def policy(queue_arn: str, sources: list[str]) -> str:
    statement = {
        "Effect": "Allow",
        "Principal": {"Service": "events.amazonaws.com"},
        "Action": "sqs:SendMessage",
        "Resource": queue_arn,
        "Condition": {"ArnEquals": {"aws:SourceArn": sources}},
    }
    return json.dumps({"Version": "2012-10-17", "Statement": [statement]})


def findings(doctor: Doctor, what: str) -> list[Any]:
    return [f for f in doctor.examine() if f.check.startswith(f"queues.dead-letters.{what}")]


def arn_of(sqs: Any, url: str) -> str:
    return str(sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"])


def run_aws_fix(sqs: Any, fix: str) -> None:
    """``aws sqs set-queue-attributes --queue-url URL --attributes JSON --region R`` as the AWS CLI runs it."""
    words = shlex.split(fix.split(" (", 1)[0])
    assert words[:3] == ["aws", "sqs", "set-queue-attributes"], fix
    parser = argparse.ArgumentParser()
    parser.add_argument("--queue-url", required=True)
    parser.add_argument("--attributes", type=json.loads, required=True)
    parser.add_argument("--region", required=True)
    given = parser.parse_args(words[3:])
    assert given.region == REGION
    sqs.set_queue_attributes(QueueUrl=given.queue_url, Attributes=given.attributes)


@pytest.mark.parametrize(
    ("what", "outputs"),
    [
        ("intake", ["LifecycleRuleName", "DisruptionRuleName", "MaintenanceRuleName"]),
        ("sweeper", ["SweepRuleName"]),
    ],
)
def test_a_dead_letter_queue_eventbridge_may_not_write_to_is_a_problem_the_fix_ends(
    stack: tuple[Doctor, Any, dict[str, str]], what: str, outputs: list[str]
) -> None:
    # Given the queue without its policy (removed by hand: aws sqs set-queue-attributes --attributes Policy=)
    doctor, sqs, urls = stack

    # When the doctor examines the stack
    (empty, refused) = findings(doctor, what)

    # Then, beside an empty queue, it finds the rules that may not write there: a problem with the fix
    assert empty.status is Status.OK
    assert refused.status is Status.PROBLEM
    assert all(RULES[output] in refused.what for output in outputs)
    assert "InvocationsFailedToBeSentToDlq" in refused.why

    # And once the operator ran that fix, the queue takes the rules' undelivered events again: nothing found
    run_aws_fix(sqs, refused.fix)
    assert [f.status for f in findings(doctor, what)] == [Status.OK]
    statement = json.loads(
        sqs.get_queue_attributes(QueueUrl=urls[what], AttributeNames=["Policy"])["Attributes"]["Policy"]
    )
    assert statement["Statement"][0]["Condition"]["ArnEquals"]["aws:SourceArn"] == [
        rule_arn(o) for o in outputs
    ]


def test_a_policy_that_leaves_out_one_rule_names_that_rule(stack: tuple[Doctor, Any, dict[str, str]]) -> None:
    # Given the intake queue's policy narrowed by hand to the lifecycle actions' rule
    doctor, sqs, urls = stack
    arn = arn_of(sqs, urls["intake"])
    sqs.set_queue_attributes(
        QueueUrl=urls["intake"], Attributes={"Policy": policy(arn, [rule_arn("LifecycleRuleName")])}
    )

    # When the doctor examines the stack
    (_, refused) = findings(doctor, "intake")

    # Then the two rules left out are named, not the one that may write
    assert refused.status is Status.PROBLEM
    assert RULES["DisruptionRuleName"] in refused.what
    assert RULES["MaintenanceRuleName"] in refused.what
    assert RULES["LifecycleRuleName"] not in refused.what


def test_the_templates_policy_is_no_problem_and_queues_no_rule_writes_to_need_none(
    stack: tuple[Doctor, Any, dict[str, str]],
) -> None:
    # Given the intake and sweeper queues with the template's policies (a list of rules, or one as a string)
    doctor, sqs, urls = stack
    intake = [rule_arn(o) for o in ("LifecycleRuleName", "DisruptionRuleName", "MaintenanceRuleName")]
    sqs.set_queue_attributes(
        QueueUrl=urls["intake"], Attributes={"Policy": policy(arn_of(sqs, urls["intake"]), intake)}
    )
    sweeper = json.loads(policy(arn_of(sqs, urls["sweeper"]), []))
    sweeper["Statement"][0]["Condition"]["ArnEquals"]["aws:SourceArn"] = rule_arn("SweepRuleName")
    sqs.set_queue_attributes(QueueUrl=urls["sweeper"], Attributes={"Policy": json.dumps(sweeper)})

    # Then every dead-letter queue is one finding, ok (the drain and eip queues have no policy, and need none)
    found = [f for f in doctor.examine() if f.check.startswith("queues.dead-letters")]
    assert [(f.check, f.status) for f in found] == [
        (f"queues.dead-letters.{w}", Status.OK) for w in ("intake", "drain", "eip", "sweeper")
    ]
