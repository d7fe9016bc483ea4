"""A rule of the stack that is enabled but no longer targets its function delivers nothing: the runbook's
Sweeper not running names "its target removed" among the causes of a schedule that stopped, and no other alarm
sees it (the intake rules' events are lost the same way, until the sweeper adopts the actions). The doctor
checked that each rule exists and is enabled, not what it delivers to."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import RULE_OUTPUTS, Doctor
from nodecycle_cli.doctor.findings import Finding, Status

REGION = "eu-west-1"
FUNCTIONS = {
    "IntakeFunctionName": "nodecycle-IntakeFunction-A1",
    "SweeperFunctionName": "nodecycle-SweeperFunction-B2",
}
# the function each rule delivers to, by the output that names it
TARGET_OF = {
    "LifecycleRuleName": "IntakeFunctionName",
    "DisruptionRuleName": "IntakeFunctionName",
    "MaintenanceRuleName": "IntakeFunctionName",
    "SweepRuleName": "SweeperFunctionName",
}


def function_arn(name: str) -> str:
    return f"arn:aws:lambda:{REGION}:123456789012:function:{name}"


@pytest.fixture
def stack() -> Iterator[tuple[Doctor, Any, dict[str, str]]]:
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        events: Any = session.client("events")
        rules = {output: f"nodecycle-{output}" for _, output in RULE_OUTPUTS}
        for output, name in rules.items():
            events.put_rule(Name=name, EventPattern='{"source": ["aws.autoscaling"]}')
            events.put_targets(
                Rule=name, Targets=[{"Id": "Function", "Arn": function_arn(FUNCTIONS[TARGET_OF[output]])}]
            )
        described = {
            "StackName": "nodecycle",
            "Outputs": [
                {"OutputKey": key, "OutputValue": value} for key, value in {**rules, **FUNCTIONS}.items()
            ],
        }
        args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)
        yield Doctor(args, session, from_description(described, REGION)), events, rules


def rule_findings(doctor: Doctor) -> list[Finding]:
    return [f for f in doctor.examine() if f.check.startswith("eventbridge.rule")]


def test_rules_that_deliver_to_their_functions_are_fine(stack: tuple[Doctor, Any, dict[str, str]]) -> None:
    doctor, _, _ = stack
    assert [(f.check, f.status) for f in rule_findings(doctor)] == [
        (f"eventbridge.rule.{what}", Status.OK) for what, _ in RULE_OUTPUTS
    ]


def test_a_schedule_whose_target_was_removed_is_a_problem(stack: tuple[Doctor, Any, dict[str, str]]) -> None:
    # Given the sweeper's schedule, enabled, its target removed by hand
    doctor, events, rules = stack
    events.remove_targets(Rule=rules["SweepRuleName"], Ids=["Function"])

    # When the doctor examines the stack
    found = {f.check: f for f in rule_findings(doctor)}

    # Then that rule is a problem that says what stops and how to put the target back
    gone = found["eventbridge.rule.sweeper schedule.target"]
    assert gone.status is Status.PROBLEM
    assert FUNCTIONS["SweeperFunctionName"] in gone.what
    assert "the sweeper no longer runs" in gone.why
    assert f"aws events put-targets --rule {rules['SweepRuleName']}" in gone.fix
    assert "docs/runbook.md#resources-deleted-outside-the-stack" in gone.fix


def test_a_rule_that_targets_another_function_is_a_problem(stack: tuple[Doctor, Any, dict[str, str]]) -> None:
    # Given the lifecycle actions' rule pointed at another function (a copy-paste, another stack's)
    doctor, events, rules = stack
    events.put_targets(
        Rule=rules["LifecycleRuleName"],
        Targets=[{"Id": "Function", "Arn": function_arn("other-IntakeFunction")}],
    )

    # Then it is a problem: this stack's intake gets none of those events
    found = {f.check: f for f in rule_findings(doctor)}
    assert found["eventbridge.rule.lifecycle actions.target"].status is Status.PROBLEM
    assert "other-IntakeFunction" in found["eventbridge.rule.lifecycle actions.target"].what


def test_a_target_of_a_published_version_or_alias_of_the_function_is_its_function(
    stack: tuple[Doctor, Any, dict[str, str]],
) -> None:
    doctor, events, rules = stack
    events.put_targets(
        Rule=rules["MaintenanceRuleName"],
        Targets=[{"Id": "Function", "Arn": function_arn(FUNCTIONS["IntakeFunctionName"]) + ":live"}],
    )
    assert {f.status for f in rule_findings(doctor)} == {Status.OK}
