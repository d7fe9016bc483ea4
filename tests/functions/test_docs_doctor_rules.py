"""`nodecycle doctor` checks "the EventBridge rules enabled", as its help and the README say: every rule the
stack creates, not only some. A disabled rule sends nothing, so no alarm can tell; the doctor is where an
operator finds it."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Status, exit_status
from nodecycle_sandbox.runner.cfn_yaml import load_template

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
REGION = "eu-west-1"
# The outputs that name the stack's rules, and the doctor's name for each
RULES = {
    "LifecycleRuleName": "lifecycle actions",
    "DisruptionRuleName": "EC2 disruptions",
    "MaintenanceRuleName": "scheduled maintenance",
    "SweepRuleName": "sweeper schedule",
}


def template_rules() -> set[str]:
    """The logical ids of the EventBridge rules SAM makes of the functions' events (function id + event id)."""
    return {
        f"{function}{event}"
        for function, resource in TEMPLATE["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
        for event, spec in (resource["Properties"].get("Events") or {}).items()
        if spec["Type"] in ("EventBridgeRule", "Schedule")
    }


def test_every_rule_of_the_stack_is_named_by_an_output() -> None:
    # Given the rules the template creates, and the outputs that name them
    named = {
        output["Value"]["Ref"]: key
        for key, output in TEMPLATE["Outputs"].items()
        if isinstance(output["Value"], dict) and output["Value"].get("Ref") in template_rules()
    }
    # Then each rule has its output, for the doctor to find it by
    assert set(named) == template_rules()
    assert set(named.values()) == set(RULES)


@pytest.fixture
def session() -> Iterator[boto3.Session]:
    with mock_aws():
        yield boto3.Session(region_name=REGION)


def test_a_disabled_spot_and_state_change_rule_is_a_problem(session: boto3.Session) -> None:
    # Given a stack whose rule for EC2's disruptions (Spot warnings, stops) an operator disabled, the others enabled
    events = session.client("events")
    outputs = {output: f"nodecycle-{output}" for output in RULES}
    for name in outputs.values():
        events.put_rule(Name=name, EventPattern='{"source": ["aws.ec2"]}')
    events.disable_rule(Name=outputs["DisruptionRuleName"])
    described = {
        "StackName": "nodecycle",
        "Outputs": [{"OutputKey": key, "OutputValue": value} for key, value in outputs.items()],
    }
    args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)

    # When the doctor examines it
    findings = [
        f
        for f in Doctor(args, session, from_description(described, REGION)).examine()
        if f.check.startswith("eventbridge.rule")
    ]

    # Then every rule was looked at; the disabled one is a problem that says what stops, and the others are fine
    by_check = {f.check: f for f in findings}
    assert set(by_check) == {f"eventbridge.rule.{what}" for what in RULES.values()}
    disabled = by_check.pop("eventbridge.rule.EC2 disruptions")
    assert disabled.status is Status.PROBLEM
    assert "Spot nodes are reclaimed undrained" in disabled.why
    assert {f.status for f in by_check.values()} == {Status.OK}
    assert exit_status(findings) == 1
