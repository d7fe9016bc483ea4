"""A rule's target without the dead-letter queue the template gives it (an operator's ``aws events put-targets``
by hand, which replaces the whole target) still delivers, but an event EventBridge cannot deliver (the function
deleted or its permission removed) is then dropped after its retries, where the intake and sweeper dead-letter
queues and their alarms would have kept and told it. The stack is the sandbox's deployment of template.yaml (its
rules' targets as SAM makes them), examined by the doctor through its CloudFormation record."""

from __future__ import annotations

import argparse
import json
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
from nodecycle_sandbox.runner.resources import SandboxResources
from nodecycle_sandbox.runner.stack import StackDeployment

ROOT = Path(__file__).resolve().parents[2]
REGION, ACCOUNT = "eu-west-1", "123456789012"


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
        clients = {name: session.client(name) for name in ("events", "eks", "cloudformation", "logs")}
        StackDeployment(
            template, stack_name="nodecycle", intrinsics=intrinsics, resources=resources, clients=clients
        ).deploy(specs)
        args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)
        yield Doctor(args, session, find(session, "nodecycle")), clients["events"]


def rule_findings(doctor: Doctor) -> dict[str, Finding]:
    return {f.check: f for f in doctor.examine() if f.check.startswith("eventbridge.rule")}


def test_the_templates_targets_are_fine(deployed: tuple[Doctor, Any]) -> None:
    doctor, _ = deployed
    assert {check: f.status for check, f in rule_findings(doctor).items()} == {
        f"eventbridge.rule.{what}": Status.OK
        for what in ("lifecycle actions", "EC2 disruptions", "scheduled maintenance", "sweeper schedule")
    }


def test_a_target_put_back_without_its_dead_letter_queue_is_a_problem(deployed: tuple[Doctor, Any]) -> None:
    # Given the lifecycle actions' target put again by hand without its DeadLetterConfig
    doctor, events = deployed
    rule = doctor._deployment.output("LifecycleRuleName")  # type: ignore[union-attr]
    (target,) = events.list_targets_by_rule(Rule=rule)["Targets"]
    dead_letters = target.pop("DeadLetterConfig")["Arn"]
    events.put_targets(Rule=rule, Targets=[target])

    # When the doctor examines the stack
    found = rule_findings(doctor)

    # Then that target is a problem, whose fix puts it back with the stack's dead-letter queue (and what else it has)
    finding = found["eventbridge.rule.lifecycle actions.dead-letters"]
    assert finding.status is Status.PROBLEM
    assert dead_letters.rsplit(":", 1)[-1] in finding.what
    assert finding.fix.startswith(f"aws events put-targets --rule {rule} --targets ")
    given = json.loads(finding.fix.split("--targets ", 1)[1].strip("'"))
    assert given == [{**target, "DeadLetterConfig": {"Arn": dead_letters}}]
    assert {check for check, f in found.items() if f.status is not Status.OK} == {
        "eventbridge.rule.lifecycle actions.dead-letters"
    }
