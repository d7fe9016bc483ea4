"""A deployment creates the template's log groups, with their retention, before the functions that log into them,
and fails, as CloudFormation does ("already exists"), where a group of that name is there already."""

from __future__ import annotations

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
