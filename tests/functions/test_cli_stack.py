"""The operator commands find a stack by its name on CloudFormation (moto): a stack that is not (yet)
deployed is named with its state, not taken for an older template."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.main import main

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
