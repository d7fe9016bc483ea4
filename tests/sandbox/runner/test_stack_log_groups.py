"""A deployment creates the template's log groups, with their retention, before the functions that log into them,
and fails, as CloudFormation does ("already exists"), where a group of that name is there already."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from .conftest import REGION, MakeRunner

TEMPLATE = """
Resources:
  Busy:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/busy/
      Handler: app.handler
      LoggingConfig: {LogGroup: !Ref BusyLogGroup}
  BusyLogGroup:
    Type: AWS::Logs::LogGroup
    Properties:
      LogGroupName: !Sub "/aws/lambda/${AWS::StackName}/busy"
      RetentionInDays: 14
Outputs:
  BusyLogGroupName:
    Value: !Ref BusyLogGroup
"""
HANDLER = """
def handler(event, context):
    print("busy at", context.log_group_name)
    return None
"""


def client(url: str, service: str) -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=url,
        region_name=REGION,
        aws_access_key_id="AKIATESTOPERATOR0000",
        aws_secret_access_key="x",
    )


def test_the_log_groups_are_created_with_their_retention(moto_url: str, make_runner: MakeRunner) -> None:
    make_runner(TEMPLATE, {"busy": HANDLER})

    (group,) = client(moto_url, "logs").describe_log_groups(logGroupNamePrefix="/aws/lambda/t/")["logGroups"]
    assert (group["logGroupName"], group["retentionInDays"]) == ("/aws/lambda/t/busy", 14)
    (stack,) = client(moto_url, "cloudformation").describe_stacks(StackName="t")["Stacks"]
    assert {"OutputKey": "BusyLogGroupName", "OutputValue": "/aws/lambda/t/busy"} in stack["Outputs"]


def test_a_log_group_already_there_fails_the_deployment(moto_url: str, make_runner: MakeRunner) -> None:
    # Given a group of the name the template gives, made before the stack (by Lambda, for a function that logged
    # before its stack's group existed, or left by hand)
    client(moto_url, "logs").create_log_group(logGroupName="/aws/lambda/t/busy")

    # Then the deployment fails, as CloudFormation's does (the stack rolls back)
    with pytest.raises(ClientError, match="ResourceAlreadyExistsException"):
        make_runner(TEMPLATE, {"busy": HANDLER})


def test_a_function_logs_into_the_group_its_logging_config_names(
    moto_url: str, make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a function whose LoggingConfig names the stack's group (not /aws/lambda/<function name>), run in its
    # container
    runner = make_runner(TEMPLATE, {"busy": HANDLER}, mode="process", log_dir=tmp_path / "logs")

    # When it runs
    assert runner.invoke("Busy", {}).ok

    # Then what it wrote is in that group, where the runbook's `aws logs tail $(out BusyLogGroupName)` reads it,
    # and its context names that group, as Lambda's does
    logs = client(moto_url, "logs")

    def found() -> list[str]:
        return [e["message"] for e in logs.filter_log_events(logGroupName="/aws/lambda/t/busy")["events"]]

    assert runner.journal.wait_until(found, timeout=10) == ["busy at /aws/lambda/t/busy"]
