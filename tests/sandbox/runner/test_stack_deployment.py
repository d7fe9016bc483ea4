"""A deployment leaves what CloudFormation would: rules an operator can disable, access entries, and a stack
whose outputs and parameters name it all; a parameter the template refuses stops it before it starts."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.runner.intrinsics import ParameterError

from .conftest import REGION, MakeRunner

TEMPLATE = """
Parameters:
  ClusterName: {Type: String, Default: ""}
  Mode: {Type: String, Default: "off", AllowedValues: ["off", allocate, pool]}
  GraceSeconds: {Type: Number, Default: 600, MinValue: 300}
  Owner: {Type: String, Default: "", AllowedPattern: "^$|^[a-z]+$"}
  PollSeconds:
    Type: String
    Default: "5"
    AllowedPattern: "^([1-9]|[1-9][0-9]|[12][0-9]{2}|300)$"
    ConstraintDescription: whole seconds from 1 to 300
Conditions:
  HasCluster: !Not [!Equals [!Ref ClusterName, ""]]
Resources:
  Work:
    Type: AWS::SQS::Queue
  Intake:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/intake/
      Handler: app.handler
      Events:
        Lifecycle:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [aws.autoscaling]}
  Access:
    Type: AWS::EKS::AccessEntry
    Condition: HasCluster
    Properties:
      ClusterName: !Ref ClusterName
      PrincipalArn: !GetAtt IntakeRole.Arn
      KubernetesGroups: [nodecycle]
      Type: STANDARD
Outputs:
  WorkQueueUrl:
    Value: !Ref Work
  RuleName:
    Value: !Ref IntakeLifecycle
  RoleArn:
    Value: !GetAtt IntakeRole.Arn
  AccessEntry:
    Condition: HasCluster
    Value: yes
"""

INTAKE = """
def handler(event, context):
    return event["detail-type"]
"""

EVENT = {"source": "aws.autoscaling", "detail-type": "EC2 Instance-launch Lifecycle Action", "detail": {}}


def client(runner: Any, service: str) -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]
        endpoint_url=runner.endpoint_url,
        region_name=REGION,
        aws_access_key_id="AKIATESTOPERATOR0000",
        aws_secret_access_key="x",
    )


def eks_cluster(runner_url: str, name: str, mode: Any) -> None:
    boto3.client(
        "eks",
        endpoint_url=runner_url,
        region_name=REGION,
        aws_access_key_id="AKIATESTOPERATOR0000",
        aws_secret_access_key="x",
    ).create_cluster(
        name=name,
        roleArn="arn:aws:iam::123456789012:role/cluster",
        resourcesVpcConfig={},
        accessConfig={"authenticationMode": mode},
    )


def test_the_stack_is_described_with_its_outputs_and_every_parameter(make_runner: MakeRunner) -> None:
    runner = make_runner(TEMPLATE, {"intake": INTAKE}, parameters={"GraceSeconds": "900"})

    (stack,) = client(runner, "cloudformation").describe_stacks(StackName="t")["Stacks"]

    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    assert outputs == {
        "WorkQueueUrl": runner.queue("Work").url,
        "RuleName": "t-IntakeLifecycle",
        "RoleArn": "arn:aws:iam::123456789012:role/t-IntakeRole",
    }
    parameters = {p["ParameterKey"]: p["ParameterValue"] for p in stack["Parameters"]}
    assert parameters == {
        "ClusterName": "",
        "Mode": "off",
        "GraceSeconds": "900",
        "Owner": "",
        "PollSeconds": "5",
    }


def test_a_disabled_rule_delivers_nothing_until_it_is_enabled_again(make_runner: MakeRunner) -> None:
    # Given the intake rule, disabled by an operator
    runner = make_runner(TEMPLATE, {"intake": INTAKE})
    events = client(runner, "events")
    assert events.describe_rule(Name="t-IntakeLifecycle")["State"] == "ENABLED"
    events.disable_rule(Name="t-IntakeLifecycle")

    # When an event is published, then the rule is enabled and another one is
    runner.publish(EVENT)
    events.enable_rule(Name="t-IntakeLifecycle")
    runner.publish({**EVENT, "detail-type": "EC2 Instance-terminate Lifecycle Action"})

    # Then only the second reached the function
    (invocation,) = runner.journal.wait_until(lambda: runner.journal.invocations("Intake"), timeout=5)
    assert invocation.response == "EC2 Instance-terminate Lifecycle Action"


def test_access_entries_are_created_on_a_cluster_that_takes_them(
    moto_url: str, make_runner: MakeRunner
) -> None:
    eks_cluster(moto_url, "prod", "API_AND_CONFIG_MAP")
    runner = make_runner(TEMPLATE, {"intake": INTAKE}, parameters={"ClusterName": "prod"})

    entry = client(runner, "eks").describe_access_entry(
        clusterName="prod", principalArn="arn:aws:iam::123456789012:role/t-IntakeRole"
    )["accessEntry"]
    assert entry["kubernetesGroups"] == ["nodecycle"]


def test_a_config_map_cluster_refuses_the_access_entries_and_the_deployment_fails(
    moto_url: str, make_runner: MakeRunner
) -> None:
    eks_cluster(moto_url, "legacy", "CONFIG_MAP")
    with pytest.raises(ClientError, match="InvalidRequestException"):
        make_runner(TEMPLATE, {"intake": INTAKE}, parameters={"ClusterName": "legacy"})


@pytest.mark.parametrize(
    ("name", "value", "constraint"),
    [
        ("GraceSeconds", "60", "must be a number not less than 300 (MinValue)"),
        ("GraceSeconds", "soon", "must be a number (Type: Number)"),
        ("Mode", "sometimes", "must be one of off, allocate, pool (AllowedValues)"),
        ("Owner", "Blue-1", "must match the pattern ^$|^[a-z]+$ (AllowedPattern)"),
        # (a whole number's pattern is said as CloudFormation says it: by its ConstraintDescription)
        ("PollSeconds", "5.5", "must be whole seconds from 1 to 300 (AllowedPattern)"),
        ("PollSeconds", "0", "must be whole seconds from 1 to 300 (AllowedPattern)"),
    ],
)
def test_a_parameter_value_the_template_refuses_stops_the_deployment_naming_its_constraint(
    make_runner: MakeRunner, name: str, value: str, constraint: str
) -> None:
    with pytest.raises(ParameterError) as refused:
        make_runner(TEMPLATE, {"intake": INTAKE}, parameters={name: value}, min_values=True)
    assert str(refused.value) == f"parameter {name}={value!r} is not valid: it {constraint}"


def test_an_undeclared_parameter_is_refused(make_runner: MakeRunner) -> None:
    with pytest.raises(ParameterError, match="declares no parameter Nope"):
        make_runner(TEMPLATE, {"intake": INTAKE}, parameters={"Nope": "1"})


def test_a_sandbox_that_takes_numbers_below_their_minimum_still_refuses_a_fraction(
    make_runner: MakeRunner,
) -> None:
    # Given a sandbox told to take numbers below what AWS allows (a campaign that compresses time),
    # Then a whole number below the range a whole-number parameter states is taken, and a fraction is not
    runner = make_runner(TEMPLATE, {"intake": INTAKE}, parameters={"PollSeconds": "0"}, min_values=False)
    (stack,) = client(runner, "cloudformation").describe_stacks(StackName="t")["Stacks"]
    assert {"ParameterKey": "PollSeconds", "ParameterValue": "0"} in stack["Parameters"]
    with pytest.raises(ParameterError, match="PollSeconds"):
        make_runner(TEMPLATE, {"intake": INTAKE}, parameters={"PollSeconds": "0.5"}, min_values=False)


RULED = """
Parameters:
  Mode: {Type: String, Default: "off", AllowedValues: ["off", pool]}
  Pool: {Type: String, Default: ""}
Rules:
  PoolNamed:
    RuleCondition: !Equals [!Ref Mode, pool]
    Assertions:
      - Assert: !Not [!Equals [!Ref Pool, ""]]
        AssertDescription: name the pool
Resources:
  Work:
    Type: AWS::SQS::Queue
"""


def test_parameters_that_break_a_rule_stop_the_deployment_before_anything_is_created(
    moto_url: str, make_runner: MakeRunner
) -> None:
    # Given parameters each valid alone that break a rule of the template together (any stack the runner deploys:
    # a sandbox's second stack too), When it is deployed, Then it is refused before its queue is created
    with pytest.raises(ParameterError, match="the parameters break rule PoolNamed: name the pool"):
        make_runner(RULED, {}, parameters={"Mode": "pool"})
    assert client(make_runner(RULED, {}, parameters={"Mode": "pool", "Pool": "blue"}), "sqs").list_queues()[
        "QueueUrls"
    ] == [f"{moto_url}/123456789012/t-Work"]
