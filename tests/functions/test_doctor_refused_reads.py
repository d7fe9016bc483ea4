"""The doctor run by an identity AWS refuses everything (a read-only role without the stack's services, a
service control policy): each check it could not make is one line that names the permission to grant (the
action AWS names), never a traceback nor a finding that takes the refusal for something missing."""

from __future__ import annotations

import argparse
import re
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Status

REGION, ACCOUNT = "eu-west-1", "123456789012"
OUTPUTS = {
    "OwnerId": "nodecycle",
    "LifecycleTableName": "nodecycle-LifecycleTable",
    "IntakeDeadLetterQueueUrl": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/nodecycle-IntakeDlq",
    "DrainDeadLetterQueueUrl": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/nodecycle-DrainDlq",
    "EipDeadLetterQueueUrl": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/nodecycle-EipDlq",
    "SweeperDeadLetterQueueUrl": f"https://sqs.{REGION}.amazonaws.com/{ACCOUNT}/nodecycle-SweeperDlq",
    "IntakeQueueArn": f"arn:aws:sqs:{REGION}:{ACCOUNT}:nodecycle-IntakeQueue",
    "LifecycleRuleName": "nodecycle-LifecycleRule",
    "DisruptionRuleName": "nodecycle-DisruptionRule",
    "MaintenanceRuleName": "nodecycle-MaintenanceRule",
    "SweepRuleName": "nodecycle-SweepRule",
    "IntakeFunctionName": "nodecycle-intake",
    "DrainFunctionName": "nodecycle-drain",
    "WakeFunctionName": "nodecycle-wake",
    "EipFunctionName": "nodecycle-eip",
    "SweeperFunctionName": "nodecycle-sweeper",
    "DrainLogGroupName": "/aws/lambda/nodecycle/drain",
}
PARAMETERS = {"ClusterName": "", "ManagedGroups": "workers", "DrainConcurrency": "7", "WakeConcurrency": "3"}
USER = f"arn:aws:sts::{ACCOUNT}:assumed-role/ReadOnly/operator"


def refuse_everything(session: boto3.Session) -> list[str]:
    """Every call of ``session``'s clients refused as AWS refuses a call no policy allows, naming the action
    (JSON protocols: AccessDeniedException; query: AccessDenied); the permissions asked, in order."""
    asked: list[str] = []

    def refused(model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        service = model.service_model.signing_name
        action = f"{service}:{model.name}"
        asked.append(action)
        code = "AccessDenied" if model.service_model.protocol in ("query", "ec2") else "AccessDeniedException"
        message = (
            f"User: {USER} is not authorized to perform: {action} because no identity-based policy allows the "
            f"{action} action"
        )
        response = AWSResponse("https://aws", 403, HTTPHeaders(), None)
        return response, {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": 403},
        }

    session.events.register("before-call", refused)  # type: ignore[arg-type]  # (its answer is the call's)
    return asked


def test_every_check_refused_is_one_line_naming_the_permission(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAREADONLY00000001")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    session = boto3.Session(region_name=REGION)
    asked = refuse_everything(session)
    described = {
        "StackName": "nodecycle",
        "StackStatus": "UPDATE_COMPLETE",
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in OUTPUTS.items()],
        "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in PARAMETERS.items()],
    }
    args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)

    # When the doctor examines the stack
    findings = Doctor(args, session, from_description(described, REGION)).examine()

    # Then it asked AWS for each of its reads, and each check that reads AWS is one it could not make: one line
    # that names the permission AWS refused and says to grant it (none a problem: nothing was found missing)
    assert {"cloudformation:DescribeStacks", "events:DescribeRule", "sqs:GetQueueAttributes"} <= set(asked)
    assert {
        "lambda:GetFunctionConcurrency",
        "logs:DescribeLogGroups",
        "dynamodb:Query",
        "autoscaling:DescribeAutoScalingGroups",
    } <= set(asked)
    # (the checks of the parameters against one another read only the stack's description, already read)
    findings = [f for f in findings if not f.check.startswith("settings.")]
    assert findings
    assert [f for f in findings if f.status is not Status.UNCHECKED] == []
    for finding in findings:
        assert "\n" not in finding.what
        (permission,) = set(re.findall(r"perform: (\w+:\w+)", finding.what))
        assert permission in asked
        assert "grant that action" in finding.what
