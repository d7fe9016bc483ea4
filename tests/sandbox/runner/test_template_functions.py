"""template.yaml's functions, registered by the runner's code with Lambda (moto), carry the template's settings:
what the runbook's ``aws lambda get-function-concurrency`` and ``list-event-source-mappings`` read in the sandbox
is what they read in an account deployed from the same template."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.functions import FunctionSpec, read_functions
from nodecycle_sandbox.runner.intrinsics import Intrinsics
from nodecycle_sandbox.runner.lambda_functions import LambdaFunctions
from nodecycle_sandbox.runner.resources import SandboxResources

ROOT = Path(__file__).resolve().parents[3]
REGION, ACCOUNT = "eu-west-1", "123456789012"
PARAMETERS = {"ClusterName": "sandbox", "CreateAccessEntries": "false", "DrainConcurrency": "7"}


@pytest.fixture
def registered() -> Iterator[tuple[list[FunctionSpec], Intrinsics, Any]]:
    template = load_template(ROOT / "template.yaml")
    with mock_aws():
        resources = SandboxResources(
            template,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            sqs=boto3.client("sqs", region_name=REGION),
            dynamodb=boto3.client("dynamodb", region_name=REGION),
        )
        intrinsics = Intrinsics(
            template,
            resources=resources,
            stack_name="nodecycle",
            region=REGION,
            account=ACCOUNT,
            parameters=PARAMETERS,
        )
        resources.intrinsics = intrinsics
        resources.create_all()
        specs = read_functions(
            template, root=ROOT, intrinsics=intrinsics, resources=resources, region=REGION, account=ACCOUNT
        )
        clients = {name: boto3.client(name, region_name=REGION) for name in ("lambda", "iam")}
        LambdaFunctions(template, intrinsics=intrinsics, resources=resources, clients=clients).deploy(specs)
        yield specs, intrinsics, clients["lambda"]


def test_each_function_has_the_templates_settings_in_lambda(
    registered: tuple[list[FunctionSpec], Intrinsics, Any],
) -> None:
    specs, intrinsics, aws = registered
    template = load_template(ROOT / "template.yaml")
    assert {spec.logical_id for spec in specs} == {
        name for name, r in template["Resources"].items() if r["Type"] == "AWS::Serverless::Function"
    }
    for spec in specs:
        properties = template["Resources"][spec.logical_id]["Properties"]
        configuration = aws.get_function(FunctionName=spec.name)["Configuration"]
        assert configuration["Timeout"] == properties["Timeout"], spec.logical_id
        assert configuration["MemorySize"] == properties["MemorySize"], spec.logical_id
        assert configuration["Role"] == intrinsics.resolve(properties["Role"]), spec.logical_id
        declared = {
            **(template["Globals"]["Function"].get("Environment") or {}).get("Variables", {}),
            **(properties.get("Environment") or {}).get("Variables", {}),
        }
        assert set(configuration["Environment"]["Variables"]) == set(declared), spec.logical_id
        reserved = aws.get_function_concurrency(FunctionName=spec.name)["ReservedConcurrentExecutions"]
        assert reserved == int(intrinsics.resolve(properties["ReservedConcurrentExecutions"])), (
            spec.logical_id
        )

        mappings = aws.list_event_source_mappings(FunctionName=spec.name)["EventSourceMappings"]
        events = {n: e for n, e in properties["Events"].items() if e["Type"] == "SQS"}
        assert len(mappings) == len(events), spec.logical_id
        for event in events.values():
            declared_mapping = intrinsics.resolve(event["Properties"])
            (mapping,) = [m for m in mappings if m["EventSourceArn"] == declared_mapping["Queue"]]
            assert mapping["State"] == "Enabled"
            assert mapping["BatchSize"] == declared_mapping["BatchSize"]
            assert mapping["FunctionResponseTypes"] == declared_mapping["FunctionResponseTypes"]
            assert mapping["ScalingConfig"] == {
                "MaximumConcurrency": int(declared_mapping["ScalingConfig"]["MaximumConcurrency"])
            }


def test_the_drain_functions_concurrency_is_its_parameters(
    registered: tuple[list[FunctionSpec], Intrinsics, Any],
) -> None:
    # (a parameter that is not the default: the comparison above cannot pass with the default baked in)
    specs, _, aws = registered
    (drain,) = [s for s in specs if s.logical_id == "DrainFunction"]
    assert aws.get_function_concurrency(FunctionName=drain.name)["ReservedConcurrentExecutions"] == 7
