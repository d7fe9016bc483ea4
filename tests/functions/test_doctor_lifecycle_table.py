"""A stack's lifecycle table deleted outside the stack (by hand, a cleanup script, another stack's teardown) is
something wrong, as a deleted dead-letter queue is: every intake, step and sweep fails on it. The doctor must
say so (a problem, exit 1), not that it could not look (exit 3, "nothing wrong found"), and ``status`` must
name the table, not report a refusal (moto answers a Query on it as DynamoDB does: ResourceNotFoundException).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.main import main
from nodecycle_sandbox.runner.cfn_yaml import load_template

REGION = "eu-west-1"
TABLE = "nodecycle-LifecycleTable-1A2B3C"
TEMPLATE = json.dumps(
    {
        "Resources": {"Queue": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {"OwnerId": {"Value": "nodecycle"}, "LifecycleTableName": {"Value": TABLE}},
    }
)


@pytest.fixture
def stack_without_its_table(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("NODECYCLE_STACK", raising=False)
    with mock_aws():
        boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName="nodecycle", TemplateBody=TEMPLATE
        )
        yield


def test_the_doctor_finds_a_deleted_lifecycle_table_a_problem(
    stack_without_its_table: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # When the doctor examines a stack whose lifecycle table is gone
    main(["doctor", "--stack", "nodecycle", "--region", REGION, "--json"])

    # Then its lifecycles finding is a problem that names the table, not a check it could not make
    (found,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["check"] == "lifecycles"]
    assert found["status"] == "problem", found
    assert TABLE in found["what"]
    assert found["fix"]


def test_status_names_a_deleted_lifecycle_table(
    stack_without_its_table: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # When the operator lists the stack's lifecycles
    code = main(["status", "--stack", "nodecycle", "--region", REGION])

    # Then one line names the missing table and the stack, and no refusal
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert f"lifecycle table {TABLE} does not exist" in err
    assert "refused" not in err


def test_the_fix_of_a_deleted_lifecycle_table_restores_what_a_restore_leaves_out(
    stack_without_its_table: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the table the template makes: its records expire by TTL, and it has point-in-time recovery
    template = load_template(Path(__file__).resolve().parents[2] / "template.yaml")
    table = template["Resources"]["LifecycleTable"]["Properties"]
    ttl = table["TimeToLiveSpecification"]
    assert ttl["Enabled"]
    assert table["PointInTimeRecoverySpecification"]["PointInTimeRecoveryEnabled"]

    # When the doctor examines a stack whose lifecycle table is gone
    main(["doctor", "--stack", "nodecycle", "--region", REGION, "--json"])

    # Then its fix restores the table from DynamoDB's backup under its name, and then turns on again what a
    # restore does not bring back (DynamoDB restores neither TTL nor point-in-time recovery): without its TTL,
    # no finished lifecycle's record ever leaves the table
    (found,) = [f for f in json.loads(capsys.readouterr().out)["findings"] if f["check"] == "lifecycles"]
    fix = " ".join(found["fix"].split())
    assert f"restore-table-from-backup --target-table-name {TABLE}" in fix
    assert (
        f"aws dynamodb update-time-to-live --table-name {TABLE} --time-to-live-specification "
        f"Enabled=true,AttributeName={ttl['AttributeName']}"
    ) in fix
    assert (
        f"aws dynamodb update-continuous-backups --table-name {TABLE} "
        "--point-in-time-recovery-specification PointInTimeRecoveryEnabled=true"
    ) in fix
    assert "sam deploy" not in fix
