"""The sandbox's EventBridge rules target their functions as template.yaml declares, as SAM makes them: the target
id SAM gives (``<rule logical id>LambdaTarget``), and the event's ``RetryPolicy`` and ``DeadLetterConfig``. What
``aws events list-targets-by-rule`` shows in the sandbox is what it shows in an account, so that the doctor's and
the runbook's readings of a target can be checked against it (a target whose dead-letter queue or retry policy
was lost is what an operator's ``put-targets`` by hand leaves)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.functions import read_functions
from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.resources import SandboxResources
from nodecycle_sandbox.runner.stack import StackDeployment

ROOT = Path(__file__).resolve().parents[3]
REGION, ACCOUNT = "eu-west-1", "123456789012"
RULE_EVENTS = ("EventBridgeRule", "CloudWatchEvent", "Schedule")


@pytest.fixture
def deployed() -> Iterator[tuple[StackDeployment, dict[str, Any]]]:
    """template.yaml deployed by the sandbox's runner code on moto (its queues, then its rules and stack)."""
    template = load_template(ROOT / "template.yaml")
    with mock_aws():
        clients: dict[str, Any] = {
            name: boto3.client(name, region_name=REGION)
            for name in ("sqs", "dynamodb", "events", "eks", "cloudformation", "logs", "lambda")
        }
        resources = SandboxResources(
            template,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            sqs=clients["sqs"],
            dynamodb=clients["dynamodb"],
        )
        resources.intrinsics = Intrinsics(
            template,
            resources=resources,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            parameters={"ClusterName": "sandbox", "CreateAccessEntries": "false"},
        )
        resources.create_all()
        specs = read_functions(
            template,
            root=ROOT,
            intrinsics=resources.intrinsics,
            resources=resources,
            region=REGION,
            account=ACCOUNT,
        )
        deployment = StackDeployment(
            template,
            stack_name="nodecycle",
            intrinsics=resources.intrinsics,
            resources=resources,
            clients=clients,
        )
        deployment.deploy(specs)
        yield deployment, clients


def queue_arn(sqs: Any, reference: Any) -> str:
    """The ARN of the queue a template's ``!GetAtt Queue.Arn`` names, as SQS says it (not as the sandbox made it)."""
    (logical_id, attribute) = reference["Fn::GetAtt"]
    assert attribute == "Arn"
    url = sqs.get_queue_url(QueueName=f"nodecycle-{logical_id}")["QueueUrl"]
    arn: str = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return arn


def declared_targets(sqs: Any) -> dict[str, dict[str, Any]]:
    """Rule logical id -> the one target SAM makes of the template's event (samtranslator's push.py
    _construct_target): its Id, the function's ARN, and the event's RetryPolicy and DeadLetterConfig as given."""
    template = load_template(ROOT / "template.yaml")
    targets = {}
    for function, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        for event, declared in (resource["Properties"].get("Events") or {}).items():
            if declared["Type"] not in RULE_EVENTS:
                continue
            properties = declared.get("Properties") or {}
            target: dict[str, Any] = {
                "Id": f"{function}{event}LambdaTarget",
                "Arn": f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:nodecycle-{function}",
            }
            if "RetryPolicy" in properties:
                target["RetryPolicy"] = properties["RetryPolicy"]
            if "DeadLetterConfig" in properties:
                target["DeadLetterConfig"] = {"Arn": queue_arn(sqs, properties["DeadLetterConfig"]["Arn"])}
            targets[f"{function}{event}"] = target
    return targets


def test_each_rules_targets_are_the_templates(deployed: tuple[StackDeployment, dict[str, Any]]) -> None:
    deployment, clients = deployed
    declared = declared_targets(clients["sqs"])
    # (every rule of the template carries a retry policy or a dead-letter queue: a comparison that cannot pass
    # with the targets' settings dropped)
    assert declared
    assert all("DeadLetterConfig" in target for target in declared.values())

    listed = {}
    for (function, event), rule in deployment.rules.items():
        listed[f"{function}{event}"] = clients["events"].list_targets_by_rule(Rule=rule.name)["Targets"]

    assert listed == {rule: [target] for rule, target in declared.items()}


def test_the_function_names_the_targets_use_are_the_sandboxs(
    deployed: tuple[StackDeployment, dict[str, Any]],
) -> None:
    # (declared_targets guesses nodecycle-<logical id>: the deployment's own names must agree, or the comparison
    # above compares with a guess)
    deployment, clients = deployed
    for (function, _event), rule in deployment.rules.items():
        (target,) = clients["events"].list_targets_by_rule(Rule=rule.name)["Targets"]
        assert target["Arn"].endswith(f":function:nodecycle-{function}")
