"""The doctor reads the stack's functions in Lambda: one throttled to nothing by hand (reserved concurrency 0, an
emergency stop) or whose queue mapping was disabled by hand runs nothing while its rule and
queue look healthy, and ``sam deploy`` does not undo either. The functions are registered by the sandbox's own code
from template.yaml (what ``aws lambda`` shows against the sandbox), and changed by hand as an operator would."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Finding, Status
from nodecycle_cli.doctor.function_checks import FUNCTION_OUTPUTS, MAPPED, RESERVED_CONCURRENCY
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.functions import read_functions
from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.lambda_functions import LambdaFunctions
from nodecycle_sandbox.runner.resources import SandboxResources

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")
REGION, ACCOUNT = "eu-west-1", "123456789012"
PARAMETERS = {"ClusterName": "", "DrainConcurrency": "7", "WakeConcurrency": "3"}


@pytest.fixture
def deployed() -> Iterator[tuple[Doctor, Any, dict[str, str]]]:
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        resources = SandboxResources(
            TEMPLATE,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            sqs=session.client("sqs"),
            dynamodb=session.client("dynamodb"),
        )
        intrinsics = Intrinsics(
            TEMPLATE,
            resources=resources,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            parameters=PARAMETERS,
        )
        resources.intrinsics = intrinsics
        resources.create_all()
        specs = read_functions(
            TEMPLATE, root=ROOT, intrinsics=intrinsics, resources=resources, region=REGION, account=ACCOUNT
        )
        lambda_: Any = session.client("lambda")
        clients = {"lambda": lambda_, "iam": session.client("iam")}
        LambdaFunctions(TEMPLATE, intrinsics=intrinsics, resources=resources, clients=clients).deploy(specs)
        names = {f"{spec.logical_id}Name": spec.name for spec in specs}
        described = {
            "StackName": "nodecycle",
            "Outputs": [{"OutputKey": key, "OutputValue": value} for key, value in names.items()],
            "Parameters": [
                {"ParameterKey": key, "ParameterValue": value} for key, value in PARAMETERS.items()
            ],
        }
        args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)
        yield Doctor(args, session, from_description(described, REGION)), lambda_, names


def function_findings(doctor: Doctor) -> list[Finding]:
    return [f for f in doctor.examine() if f.check.startswith("lambda.function")]


def test_functions_as_deployed_are_fine(deployed: tuple[Doctor, Any, dict[str, str]]) -> None:
    doctor, _, _ = deployed
    findings = function_findings(doctor)
    assert {(f.check, f.status) for f in findings} == {
        *((f"lambda.function.{what}.concurrency", Status.OK) for what in FUNCTION_OUTPUTS),
        *((f"lambda.function.{what}.mapping", Status.OK) for what in MAPPED),
    }


def test_a_function_throttled_to_nothing_by_hand_is_a_problem_with_the_templates_concurrency_to_give_back(
    deployed: tuple[Doctor, Any, dict[str, str]],
) -> None:
    # Given the drain function stopped by hand (an emergency stop), and never started again
    doctor, lambda_, names = deployed
    drain = names["DrainFunctionName"]
    lambda_.put_function_concurrency(FunctionName=drain, ReservedConcurrentExecutions=0)

    # When the doctor examines the stack
    (finding,) = [f for f in function_findings(doctor) if f.status is not Status.OK]

    # Then it is a problem, whose fix gives the function the stack's concurrency back (its parameter's value)
    assert finding.check == "lambda.function.drain.concurrency"
    assert finding.status is Status.PROBLEM
    assert drain in finding.what
    assert finding.fix == (
        f"aws lambda put-function-concurrency --function-name {drain} --reserved-concurrent-executions 7"
    )


@pytest.mark.parametrize(
    ("what", "entry"),
    [("intake", "docs/runbook.md#intake-dead-letters"), ("sweeper", "docs/runbook.md#sweeper-not-running")],
)
def test_a_rules_function_stopped_at_zero_says_its_events_go_to_the_dead_letter_queue_unrun(
    deployed: tuple[Doctor, Any, dict[str, str]], what: str, entry: str
) -> None:
    # Given a function EventBridge invokes asynchronously, stopped by hand
    doctor, lambda_, names = deployed
    lambda_.put_function_concurrency(
        FunctionName=names[FUNCTION_OUTPUTS[what]], ReservedConcurrentExecutions=0
    )

    (finding,) = [f for f in function_findings(doctor) if f.status is not Status.OK]

    # Then its finding says that Lambda sends each event to the dead-letter queue at once, not run once undone
    # (not that they wait in Lambda's queue)
    assert finding.check == f"lambda.function.{what}.concurrency"
    assert "at once" in finding.why
    assert "ZeroReservedConcurrency" in finding.why
    assert entry in finding.why


def test_a_mapping_disabled_by_hand_is_a_problem_with_the_command_that_enables_it(
    deployed: tuple[Doctor, Any, dict[str, str]],
) -> None:
    doctor, lambda_, names = deployed
    wake = names["WakeFunctionName"]
    (mapping,) = lambda_.list_event_source_mappings(FunctionName=wake)["EventSourceMappings"]
    lambda_.update_event_source_mapping(UUID=mapping["UUID"], Enabled=False)

    (finding,) = [f for f in function_findings(doctor) if f.status is not Status.OK]

    assert finding.check == "lambda.function.wake.mapping"
    assert finding.status is Status.PROBLEM
    assert "Disabled" in finding.what
    assert finding.fix == f"aws lambda update-event-source-mapping --uuid {mapping['UUID']} --enabled"


def test_the_doctors_reserved_concurrencies_are_the_templates() -> None:
    # (the fix above gives back what the doctor holds: it must be the template's, literal or parameter)
    declared = {}
    for what, output in FUNCTION_OUTPUTS.items():
        value = TEMPLATE["Outputs"][output]["Value"]
        function = value["Ref"] if isinstance(value, dict) else value
        reserved = TEMPLATE["Resources"][function]["Properties"]["ReservedConcurrentExecutions"]
        declared[what] = reserved["Ref"] if isinstance(reserved, dict) else reserved
    assert declared == RESERVED_CONCURRENCY
    mapped = {
        what
        for what, output in FUNCTION_OUTPUTS.items()
        for event in TEMPLATE["Resources"][TEMPLATE["Outputs"][output]["Value"]["Ref"]]["Properties"][
            "Events"
        ].values()
        if event["Type"] == "SQS"
    }
    assert mapped == set(MAPPED)
