"""The runner reads the function wiring from the template: intrinsics, Globals, queues, table, triggers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nodecycle_sandbox.runner.cfn_yaml import _CfnLoader, load_template
from nodecycle_sandbox.runner.intrinsics import UnsupportedIntrinsic

from .conftest import MakeRunner

ROOT = Path(__file__).resolve().parents[3]

TEMPLATE = """
Parameters:
  OwnerId: {Type: String, Default: ""}
  Subnets: {Type: CommaDelimitedList, Default: ""}
  Budget: {Type: Number, Default: 3}
Conditions:
  OwnerIsStackName: !Equals [!Ref OwnerId, ""]
  UseVpc: !Not [!Equals [!Join ["", !Ref Subnets], ""]]
  Both: !And [!Condition OwnerIsStackName, !Not [!Condition UseVpc]]
Globals:
  Function:
    Timeout: 7
    Environment:
      Variables:
        OWNER: !If [OwnerIsStackName, !Ref AWS::StackName, !Ref OwnerId]
        QUEUE_URL: !Ref Work
        QUEUE_ARN: !GetAtt Work.Arn
        TABLE: !Ref Records
        BUDGET: !Ref Budget
        WHERE: !Sub "${AWS::Region}/${AWS::AccountId}/${Work.QueueName}"
        BOTH: !If [Both, "yes", "no"]
        FLAG: true
Resources:
  Dlq:
    Type: AWS::SQS::Queue
  Work:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 45
      RedrivePolicy: {deadLetterTargetArn: !GetAtt Dlq.Arn, maxReceiveCount: 4}
  VpcOnly:
    Type: AWS::SQS::Queue
    Condition: UseVpc
  Records:
    Type: AWS::DynamoDB::Table
    Properties:
      BillingMode: PAY_PER_REQUEST
      AttributeDefinitions:
        - {AttributeName: id, AttributeType: S}
        - {AttributeName: open_owner, AttributeType: S}
        - {AttributeName: due_epoch, AttributeType: "N"}
      KeySchema: [{AttributeName: id, KeyType: HASH}]
      GlobalSecondaryIndexes:
        - IndexName: open-by-due
          KeySchema:
            - {AttributeName: open_owner, KeyType: HASH}
            - {AttributeName: due_epoch, KeyType: RANGE}
          Projection: {ProjectionType: KEYS_ONLY}
      TimeToLiveSpecification: {AttributeName: expires_at, Enabled: true}
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Timeout: 9
      Environment:
        Variables:
          ONLY_HERE: "1"
"""

HANDLER = "def handler(event, context):\n    return None\n"


def test_globals_and_intrinsics_resolve_into_the_environment(make_runner: MakeRunner) -> None:
    # When the runner deploys the template
    runner = make_runner(TEMPLATE, {"worker": HANDLER})

    # Then every setting is resolved as CloudFormation would
    env = runner.environments["Worker"]
    work = runner.queue("Work")
    assert env["OWNER"] == "t"
    assert (env["QUEUE_URL"], env["QUEUE_ARN"]) == (work.url, work.arn)
    assert env["TABLE"] == "t-Records"
    assert (env["BUDGET"], env["FLAG"], env["BOTH"], env["ONLY_HERE"]) == ("3", "true", "yes", "1")
    assert env["WHERE"] == "eu-west-1/123456789012/t-Work"
    assert env["AWS_ENDPOINT_URL"] == runner.endpoint_url
    assert env["AWS_LAMBDA_FUNCTION_NAME"] == "t-Worker"
    assert runner.functions["Worker"].timeout == 9
    assert runner.function_of_access_key(env["AWS_ACCESS_KEY_ID"]) == "Worker"


def test_parameter_overrides_and_conditions_choose_what_is_deployed(make_runner: MakeRunner) -> None:
    # When the template is deployed with an owner and subnets
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, parameters={"OwnerId": "blue", "Subnets": "s-1,s-2"})

    # Then the owner is taken, and the VPC-only queue exists
    assert runner.environments["Worker"]["OWNER"] == "blue"
    assert runner.environments["Worker"]["BOTH"] == "no"
    assert runner.queue("VpcOnly").name == "t-VpcOnly"


def test_queues_and_the_table_are_created_as_declared(make_runner: MakeRunner) -> None:
    # When the runner deploys the template
    runner = make_runner(TEMPLATE, {"worker": HANDLER})

    # Then the queue has its visibility timeout and redrive policy
    work = runner.queue("Work")
    attributes = runner.sqs.get_queue_attributes(QueueUrl=work.url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "45"
    assert (work.max_receive_count, work.dead_letter_arn) == (4, runner.queue("Dlq").arn)

    # And the table has its index and time to live
    table = runner.dynamodb.describe_table(TableName="t-Records")["Table"]
    assert [i["IndexName"] for i in table["GlobalSecondaryIndexes"]] == ["open-by-due"]
    ttl = runner.dynamodb.describe_time_to_live(TableName="t-Records")["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "expires_at"


def test_a_reference_to_a_resource_its_condition_leaves_out_fails_the_deployment(
    make_runner: MakeRunner,
) -> None:
    # Given a setting that names the VPC-only queue whatever the condition (no subnets: the queue is not made)
    template = TEMPLATE.replace('ONLY_HERE: "1"', "ONLY_HERE: !Ref VpcOnly")

    # Then the deployment fails, as CloudFormation's "Template format error: Unresolved resource dependencies
    # [VpcOnly] in the Resources block of the template", rather than making the queue for the reference
    with pytest.raises(ValueError, match=r"Unresolved resource dependencies \[VpcOnly\]"):
        make_runner(template, {"worker": HANDLER})


def test_a_reference_to_a_conditional_resource_in_the_branch_its_condition_takes_is_resolved(
    make_runner: MakeRunner,
) -> None:
    # Given the same reference behind the queue's own condition (the branch not taken is never resolved)
    template = TEMPLATE.replace('ONLY_HERE: "1"', "ONLY_HERE: !If [UseVpc, !GetAtt VpcOnly.Arn, none]")

    assert make_runner(template, {"worker": HANDLER}).environments["Worker"]["ONLY_HERE"] == "none"


def test_an_unsupported_intrinsic_is_named(make_runner: MakeRunner) -> None:
    # Given a setting that imports a value from another stack
    template = TEMPLATE.replace("FLAG: true", "FLAG: !ImportValue other-stack-flag")

    # Then starting the runner says which intrinsic it cannot resolve
    with pytest.raises(UnsupportedIntrinsic, match="Fn::ImportValue"):
        make_runner(template, {"worker": HANDLER})


def test_the_repository_template_is_read(make_runner: MakeRunner, tmp_path: Path) -> None:
    # Given the repository's template
    repository = Path(__file__).resolve().parents[3]
    template = (repository / "template.yaml").read_text()

    # When the runner reads it (without starting schedules)
    runner = make_runner(
        template, {}, root=repository, schedules_enabled=False, parameters={"ManagedGroups": "nodes"}
    )

    # Then it finds the five functions, each with a handler file and the shared settings
    assert set(runner.functions) >= {
        "IntakeFunction",
        "DrainFunction",
        "WakeFunction",
        "EipFunction",
        "SweeperFunction",
    }
    for spec in runner.functions.values():
        assert spec.handler_file.name == "app.py"
        assert spec.layer_dirs == (repository / "layers",)
        assert (
            runner.environments[spec.logical_id]["NODECYCLE_DRAIN_QUEUE_URL"]
            == runner.queue("DrainQueue").url
        )
    drain = runner.functions["DrainFunction"].sqs[0]
    assert drain.report_failures
    assert drain.queue.dead_letter_arn == runner.queue("DrainDeadLetterQueue").arn
    # the wake lane: the drain function's code on its own queue, whose failures end with the drain's
    wake = runner.functions["WakeFunction"]
    assert wake.handler_file == runner.functions["DrainFunction"].handler_file
    assert wake.module_name != runner.functions["DrainFunction"].module_name
    assert (wake.sqs[0].queue.logical_id, wake.sqs[0].batch_size, wake.sqs[0].report_failures) == (
        "WakeQueue",
        1,
        True,
    )
    assert wake.sqs[0].queue.dead_letter_arn == runner.queue("DrainDeadLetterQueue").arn
    assert runner.environments["SweeperFunction"]["NODECYCLE_WAKE_QUEUE_URL"] == runner.queue("WakeQueue").url
    assert runner.functions["SweeperFunction"].schedules[0].interval == 300


def test_the_template_reads_the_same_as_with_the_pure_python_loader() -> None:
    # Given the project's template, read with libyaml when PyYAML has it (a quarter of the time)
    path = ROOT / "template.yaml"

    # Then it reads as PyYAML's own (pure Python) SafeLoader with the same tags reads it
    class PurePython(yaml.SafeLoader):
        pass

    PurePython.yaml_constructors = {
        **yaml.SafeLoader.yaml_constructors,
        **{tag: c for tag, c in _CfnLoader.yaml_constructors.items() if tag and tag.startswith("!")},
    }
    assert load_template(path) == yaml.load(path.read_text(encoding="utf-8"), Loader=PurePython)
