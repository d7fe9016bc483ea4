"""A function's permission for its rule (the ``AWS::Lambda::Permission`` SAM makes of each rule or schedule event),
removed by hand, makes EventBridge's every call to it refused: each event goes straight to the rule's dead-letter
queue (``NO_PERMISSIONS``), while the rule, its target and the function look healthy. The doctor did not look at
the functions' resource policies. The stack is the sandbox's deployment of template.yaml (its rules, functions and
permissions as the runner makes them), examined through its CloudFormation record; the fix is applied as given."""

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

from nodecycle_cli.deployment import find
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Finding, Status
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.functions import read_functions
from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.lambda_functions import LambdaFunctions
from nodecycle_sandbox.runner.resources import SandboxResources
from nodecycle_sandbox.runner.rule_targets import RuleTargets
from nodecycle_sandbox.runner.stack import StackDeployment

ROOT = Path(__file__).resolve().parents[2]
REGION, ACCOUNT = "eu-west-1", "123456789012"
RULES = ("lifecycle actions", "EC2 disruptions", "scheduled maintenance", "sweeper schedule")


@pytest.fixture
def deployed() -> Iterator[tuple[Doctor, Any]]:
    template = load_template(ROOT / "template.yaml")
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        resources = SandboxResources(
            template,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            sqs=session.client("sqs"),
            dynamodb=session.client("dynamodb"),
        )
        intrinsics = Intrinsics(
            template,
            resources=resources,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            parameters={"ClusterName": "", "CreateAccessEntries": "false"},
        )
        resources.intrinsics = intrinsics
        resources.create_all()
        specs = read_functions(
            template, root=ROOT, intrinsics=intrinsics, resources=resources, region=REGION, account=ACCOUNT
        )
        clients = {
            name: session.client(name)
            for name in ("events", "eks", "cloudformation", "logs", "lambda", "iam")
        }
        deployment = StackDeployment(
            template, stack_name="nodecycle", intrinsics=intrinsics, resources=resources, clients=clients
        )
        deployment.deploy(specs)
        LambdaFunctions(template, intrinsics=intrinsics, resources=resources, clients=clients).deploy(specs)
        RuleTargets(
            deployment,
            lambda_client=clients["lambda"],
            sqs=session.client("sqs"),
            region=REGION,
            account=ACCOUNT,
            submit=lambda *_: None,
        ).deploy({spec.logical_id: spec for spec in specs})
        args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)
        yield Doctor(args, session, find(session, "nodecycle")), clients["lambda"]


def permissions(doctor: Doctor) -> dict[str, Finding]:
    return {f.check: f for f in doctor.examine() if f.check.endswith(".permission")}


def test_each_rule_may_invoke_its_function_as_deployed(deployed: tuple[Doctor, Any]) -> None:
    doctor, _ = deployed
    assert {check: f.status for check, f in permissions(doctor).items()} == {
        f"eventbridge.rule.{what}.permission": Status.OK for what in RULES
    }


def test_a_permission_removed_by_hand_is_a_problem_whose_fix_gives_it_back(
    deployed: tuple[Doctor, Any],
) -> None:
    # Given the sweeper's permission for its schedule removed by hand
    doctor, lambda_ = deployed
    sweeper = doctor._deployment.output("SweeperFunctionName")  # type: ignore[union-attr]
    rule = doctor._deployment.output("SweepRuleName")  # type: ignore[union-attr]
    (statement,) = [
        s
        for s in json.loads(lambda_.get_policy(FunctionName=sweeper)["Policy"])["Statement"]
        if s["Condition"]["ArnLike"]["AWS:SourceArn"].endswith(f"rule/{rule}")
    ]
    lambda_.remove_permission(FunctionName=sweeper, StatementId=statement["Sid"])

    # When the doctor examines the stack, then that permission is a problem, and only that one
    found = permissions(doctor)
    problems = {check for check, f in found.items() if f.status is not Status.OK}
    assert problems == {"eventbridge.rule.sweeper schedule.permission"}
    finding = found["eventbridge.rule.sweeper schedule.permission"]
    assert sweeper in finding.what
    assert rule in finding.what

    # And its fix, run as given, gives it back: the doctor finds nothing more
    words = shlex.split(finding.fix)
    assert words[:3] == ["aws", "lambda", "add-permission"]
    options = dict(zip(words[3::2], words[4::2], strict=True))
    lambda_.add_permission(
        FunctionName=options["--function-name"],
        StatementId=options["--statement-id"],
        Action=options["--action"],
        Principal=options["--principal"],
        SourceArn=options["--source-arn"],
    )
    assert {f.status for f in permissions(doctor).values()} == {Status.OK}


def test_a_function_deleted_is_said_once_not_as_a_missing_permission(deployed: tuple[Doctor, Any]) -> None:
    doctor, lambda_ = deployed
    lambda_.delete_function(FunctionName=doctor._deployment.output("SweeperFunctionName"))  # type: ignore[union-attr]

    findings = [
        f
        for f in doctor.examine()
        if f.status is not Status.OK and f.check.startswith(("lambda.", "eventbridge."))
    ]

    assert [f.check for f in findings] == ["lambda.function.sweeper"]
    assert "does not exist" in findings[0].what
