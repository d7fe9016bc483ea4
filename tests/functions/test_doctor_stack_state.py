"""The doctor on a stack that is not simply deployed: half deleted (DELETE_FAILED, or DELETE_IN_PROGRESS), where
every resource it finds missing was taken by the deletion, not "deleted outside the stack" to be restored from a
backup; and a stack with the owner id of another nodecycle stack of the region, each taking what the other
writes for its own (template.yaml's OwnerId: "Stacks sharing a cluster need different owner ids")."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import find, from_description
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Status
from tests.functions.test_doctor_refused_reads import OUTPUTS, PARAMETERS, REGION

ARGS = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)


@pytest.fixture
def aws() -> Iterator[boto3.Session]:
    with mock_aws():
        yield boto3.Session(region_name=REGION)


def described(status: str, name: str = "nodecycle", outputs: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "StackName": name,
        "StackStatus": status,
        "Outputs": [{"OutputKey": k, "OutputValue": v} for k, v in (outputs or OUTPUTS).items()],
        "Parameters": [{"ParameterKey": k, "ParameterValue": v} for k, v in PARAMETERS.items()],
    }


def stack(aws: boto3.Session, name: str, owner: str, *, table: bool = True) -> None:
    """A stack of the region whose outputs name ``owner`` (and a lifecycle table: a nodecycle stack's)."""
    outputs: dict[str, Any] = {"OwnerId": {"Value": owner}}
    if table:
        outputs["LifecycleTableName"] = {"Value": f"{name}-LifecycleTable"}
    template = {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": outputs,
    }
    aws.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(template))


@pytest.mark.parametrize("status", ["DELETE_FAILED", "DELETE_IN_PROGRESS"])
def test_a_stack_half_deleted_is_said_so_not_a_list_of_resources_to_restore(
    aws: boto3.Session, status: str
) -> None:
    # Given a stack whose deletion stopped half way (its table, queues, functions and rules gone; its outputs
    # still there), or is under way
    doctor = Doctor(ARGS, aws, from_description(described(status), REGION))

    # When the doctor examines it
    findings = doctor.examine()

    # Then it says the stack is being deleted, and sends the operator to finish it, the hooks first; nothing
    # says to restore what the deletion took
    first = findings[0]
    assert (first.check, first.status) == ("cloudformation.stack", Status.PROBLEM)
    assert status in first.what
    assert "docs/removing.md#1-stop-the-actions-first" in first.fix
    assert "sam delete" in first.fix or "stack-delete-complete" in first.fix
    assert [f for f in findings if "restore" in f.fix or "deleted outside the stack" in f.why] == []
    assert [
        f.check for f in findings if f.check != "cloudformation.stack" and not f.check.startswith("hooks")
    ] == []


def test_another_stack_with_this_stacks_owner_id_is_a_problem(aws: boto3.Session) -> None:
    # Given this stack, another nodecycle stack deployed with the same OwnerId, and a stack of something else
    # whose output happens to be called OwnerId
    stack(aws, "nodecycle", "nodecycle")
    stack(aws, "nodecycle-blue", "nodecycle")
    stack(aws, "unrelated", "nodecycle", table=False)
    doctor = Doctor(ARGS, aws, find(aws, "nodecycle"))

    # When the doctor examines it
    (found,) = [f for f in doctor.examine() if f.check == "cloudformation.owner"]

    # Then it names the other nodecycle stack, and says to give one of them another owner id
    assert found.status is Status.PROBLEM
    assert "nodecycle-blue" in found.what
    assert "unrelated" not in found.what
    assert "OwnerId=" in found.fix


def test_a_stack_alone_with_its_owner_id_is_fine(aws: boto3.Session) -> None:
    stack(aws, "nodecycle", "nodecycle")
    stack(aws, "other", "other")

    (found,) = [
        f for f in Doctor(ARGS, aws, find(aws, "nodecycle")).examine() if f.check == "cloudformation.owner"
    ]

    assert found.status is Status.OK
