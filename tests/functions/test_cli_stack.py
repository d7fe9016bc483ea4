"""The operator commands find a stack by its name on CloudFormation (moto): a stack that is not (yet)
deployed is named with its state, not taken for an older template."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle_cli import status
from nodecycle_cli.deployment import from_description
from nodecycle_cli.main import main
from tests.functions.test_cli_status import record
from tests.support.stack import Stack

REGION = "eu-west-1"
TEMPLATE = json.dumps(
    {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"OwnerId": {"Value": "nodecycle"}, "LifecycleTableName": {"Value": "records"}},
    }
)


@pytest.fixture
def cloudformation() -> Iterator[Any]:
    with mock_aws():
        yield boto3.client("cloudformation", region_name=REGION)


def test_a_stack_whose_first_change_set_was_not_executed_is_named_with_its_state(
    cloudformation: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a first `sam deploy` whose change set was not confirmed: the stack exists, REVIEW_IN_PROGRESS,
    # without outputs
    cloudformation.create_change_set(
        StackName="nodecycle", ChangeSetName="first", TemplateBody=TEMPLATE, ChangeSetType="CREATE"
    )

    # When an operator asks for its lifecycles
    code = main(["status", "--stack", "nodecycle", "--region", REGION])

    # Then one line says the stack's state and what to do, not that it comes from an older template
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "stack nodecycle has no output LifecycleTableName: it is REVIEW_IN_PROGRESS" in err
    assert "older template" not in err


def test_status_refuses_an_owner_that_contradicts_the_stack(
    stack: Stack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given stack nodecycle (owner nodecycle) whose table holds a lifecycle of its own and one of owner blue
    store = DynamoRecordStore(stack.table, ttl=timedelta(days=1), dynamodb=boto3.client("dynamodb"))
    for index, owner in ((1, "nodecycle"), (2, "blue")):
        store.create(
            record(index, f"{index:08d}-1111-4111-8111-{'1' * 12}").model_copy(update={"owner": owner})
        )
    template = json.dumps(
        {
            "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
            "Outputs": {"OwnerId": {"Value": "nodecycle"}, "LifecycleTableName": {"Value": stack.table}},
        }
    )
    boto3.client("cloudformation").create_stack(StackName="nodecycle", TemplateBody=template)
    monkeypatch.delenv("NODECYCLE_OWNER_ID", raising=False)

    # When the operator asks the stack for owner blue's lifecycles
    code = main(["status", "--stack", "nodecycle", "--owner", "blue", "--json"])

    # Then it says the two contradict each other, rather than list the stack's own as if they were blue's
    # (stdout, asked for JSON, holds that error and no lifecycle: test_cli_json_errors)
    out, err = capsys.readouterr()
    assert json.loads(out) == {
        "error": {
            "command": "status",
            "message": err.removeprefix("nodecycle status: ").strip(),
            "exit_status": 2,
        }
    }
    assert code == 2
    assert err.count("\n") == 1
    assert "--owner blue" in err


def test_status_of_a_stack_half_deleted_says_its_table_went_with_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stack whose deletion stopped half way (DELETE_FAILED: its outputs still there, its table deleted)
    half_deleted = from_description(
        {
            "StackName": "nodecycle",
            "StackStatus": "DELETE_FAILED",
            "Outputs": [
                {"OutputKey": "OwnerId", "OutputValue": "nodecycle"},
                {"OutputKey": "LifecycleTableName", "OutputValue": "records"},
            ],
        },
        REGION,
    )
    monkeypatch.setattr(status, "find", lambda session, name: half_deleted)

    with mock_aws():
        code = main(["status", "--stack", "nodecycle", "--region", REGION])

    # Then one line says the deletion took it, not that it was deleted outside the stack (to restore)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert "stack nodecycle is DELETE_FAILED: its lifecycle table records went with its deletion" in err
    assert "outside the stack" not in err
