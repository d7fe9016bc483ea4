"""Two nodecycle stacks of the region that name one Auto Scaling group in their ManagedGroups (parameters copied
from one stack to the next, each with an owner id of its own). Both answer each of the group's lifecycle actions;
the runtime keeps them from draining a node twice (tests/integration/lifecycle/test_owners_shared_group.py), but
the doctor of either stack said nothing of it: its hooks check reads the group's owner tag, and an untagged group
named by both looked as this stack's alone."""

from __future__ import annotations

import json
from collections.abc import Iterator

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import find
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Status
from tests.functions.test_doctor_refused_reads import REGION
from tests.functions.test_doctor_stack_state import ARGS


@pytest.fixture
def aws() -> Iterator[boto3.Session]:
    with mock_aws():
        yield boto3.Session(region_name=REGION)


def stack(aws: boto3.Session, name: str, owner: str, groups: str, *, table: bool = True) -> None:
    """A stack of the region with ``owner`` among its outputs (and a lifecycle table: a nodecycle stack's) and
    ``groups`` as its ManagedGroups parameter."""
    outputs = {"OwnerId": {"Value": owner}}
    if table:
        outputs["LifecycleTableName"] = {"Value": f"{name}-LifecycleTable"}
    template = {
        "Parameters": {"ManagedGroups": {"Type": "String"}},
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": outputs,
    }
    aws.client("cloudformation").create_stack(
        StackName=name,
        TemplateBody=json.dumps(template),
        Parameters=[{"ParameterKey": "ManagedGroups", "ParameterValue": groups}],
    )


def test_a_group_another_nodecycle_stack_names_too_is_a_problem_naming_the_group_and_the_stack(
    aws: boto3.Session,
) -> None:
    # Given this stack naming two groups, another nodecycle stack (its own owner id) naming one of them, and a
    # stack of something else with a parameter of that name
    stack(aws, "nodecycle", "nodecycle", "workers-a,workers-shared")
    stack(aws, "nodecycle-green", "green", "workers-shared, workers-green")
    stack(aws, "unrelated", "unrelated", "workers-a", table=False)
    doctor = Doctor(ARGS, aws, find(aws, "nodecycle"))

    # When the doctor examines this stack
    found = [f for f in doctor.examine() if f.check == "cloudformation.groups"]

    # Then one finding names the group both stacks name and the other stack, not the unrelated one
    assert [f.status for f in found] == [Status.PROBLEM]
    assert "workers-shared by nodecycle-green" in found[0].what
    assert "workers-a" not in found[0].what
    assert "unrelated" not in found[0].what
    assert "ManagedGroups=" in found[0].fix


def test_stacks_of_groups_of_their_own_are_fine(aws: boto3.Session) -> None:
    stack(aws, "nodecycle", "nodecycle", "workers-a")
    stack(aws, "nodecycle-green", "green", "workers-green")

    found = [
        f for f in Doctor(ARGS, aws, find(aws, "nodecycle")).examine() if f.check == "cloudformation.groups"
    ]

    assert [f.status for f in found] == [Status.OK]
