"""Another nodecycle stack with this stack's owner id whose deletion is under way or stopped half way
(DELETE_IN_PROGRESS, DELETE_FAILED: an old stack replaced by this one). The doctor told the operator to give one of
them another owner id with `sam deploy --stack-name <it> --parameter-overrides OwnerId=...`, which CloudFormation
refuses for a stack in either state ("is in DELETE_FAILED state and can not be updated"): what ends the sharing is
that deletion finished. One still deployed gets the OwnerId advice as before."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import aws_checks
from nodecycle_cli.doctor.findings import Status
from tests.functions.test_doctor_refused_reads import REGION
from tests.functions.test_doctor_stack_state import described


class Stacks:
    """CloudFormation's DescribeStacks of the region (one page), as the doctor pages it."""

    def __init__(self, *stacks: dict[str, Any]) -> None:
        self._stacks = list(stacks)

    def get_paginator(self, operation: str) -> Any:
        assert operation == "describe_stacks"
        stacks = self._stacks

        class Pages:
            def paginate(self) -> list[dict[str, Any]]:
                return [{"Stacks": stacks}]

        return Pages()


def other(name: str, status: str, owner: str) -> dict[str, Any]:
    return {
        "StackName": name,
        "StackStatus": status,
        "Outputs": [
            {"OutputKey": "OwnerId", "OutputValue": owner},
            {"OutputKey": "LifecycleTableName", "OutputValue": f"{name}-LifecycleTable"},
        ],
    }


@pytest.mark.parametrize("status", ["DELETE_FAILED", "DELETE_IN_PROGRESS"])
def test_a_same_owner_stack_being_deleted_is_told_to_finish_its_deletion_not_to_change_its_owner(
    status: str,
) -> None:
    # Given this stack, and the old stack it replaces (same owner id) whose deletion failed half way or runs
    this = from_description(described("UPDATE_COMPLETE"), REGION)
    old = other("nodecycle-old", status, this.owner)

    found = aws_checks.shared_owner(Stacks(described("UPDATE_COMPLETE"), old), this)

    # Then it is named, with its state, and the fix is its deletion finished, not an update CloudFormation refuses
    assert found.status is Status.PROBLEM
    assert "nodecycle-old" in found.what
    assert status in found.what
    assert "OwnerId=" not in found.fix
    assert "sam delete --stack-name nodecycle-old" in found.fix


def test_a_deployed_and_a_half_deleted_same_owner_stack_each_get_their_own_fix() -> None:
    this = from_description(described("UPDATE_COMPLETE"), REGION)
    deployed = other("nodecycle-blue", "CREATE_COMPLETE", this.owner)
    old = other("nodecycle-old", "DELETE_FAILED", this.owner)

    found = aws_checks.shared_owner(Stacks(old, deployed), this)

    assert "nodecycle-blue" in found.what
    assert "nodecycle-old" in found.what
    assert "OwnerId=" in found.fix
    assert "sam delete --stack-name nodecycle-old" in found.fix
