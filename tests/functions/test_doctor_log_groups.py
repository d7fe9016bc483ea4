"""The doctor finds a function's log group deleted by hand: the functions' roles may write to their groups but not
create them, so Lambda drops their output until the group is made again, and ``sam deploy`` does not make it."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Finding, Status
from nodecycle_cli.doctor.function_checks import LOG_GROUP_OUTPUTS

REGION = "eu-west-1"
GROUPS = {output: f"/aws/lambda/nodecycle/{what}" for what, output in LOG_GROUP_OUTPUTS.items()}


@pytest.fixture
def deployed() -> Iterator[tuple[Doctor, Any]]:
    with mock_aws():
        session = boto3.Session(region_name=REGION)
        logs = session.client("logs")
        for group in GROUPS.values():
            logs.create_log_group(logGroupName=group)
        described = {
            "StackName": "nodecycle",
            "Outputs": [{"OutputKey": key, "OutputValue": value} for key, value in GROUPS.items()],
            "Parameters": [{"ParameterKey": "LogRetentionDays", "ParameterValue": "14"}],
        }
        args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)
        yield Doctor(args, session, from_description(described, REGION)), logs


def log_findings(doctor: Doctor) -> list[Finding]:
    return [f for f in doctor.examine() if f.check.startswith("logs.group")]


def test_the_log_groups_as_deployed_are_fine(deployed: tuple[Doctor, Any]) -> None:
    doctor, _ = deployed
    assert {(f.check, f.status) for f in log_findings(doctor)} == {
        (f"logs.group.{what}", Status.OK) for what in LOG_GROUP_OUTPUTS
    }


def test_a_log_group_deleted_by_hand_is_a_problem_whose_fix_makes_it_again_with_its_retention(
    deployed: tuple[Doctor, Any],
) -> None:
    # Given the drain function's group deleted by hand (the prefix of another group's name left there)
    doctor, logs = deployed
    logs.delete_log_group(logGroupName="/aws/lambda/nodecycle/drain")
    logs.create_log_group(logGroupName="/aws/lambda/nodecycle/drain-old")

    (finding,) = [f for f in log_findings(doctor) if f.status is not Status.OK]

    # Then it is a problem that says the logs are dropped, and its fix, run, makes the group with the stack's
    # retention
    assert (finding.check, finding.status) == ("logs.group.drain", Status.PROBLEM)
    assert "Lambda drops what the function logs" in finding.why
    for command in finding.fix.split(" && "):
        argv = shlex.split(command)
        assert argv[:2] == ["aws", "logs"]
        options = dict(zip(argv[3::2], argv[4::2], strict=True))
        getattr(logs, argv[2].replace("-", "_"))(
            logGroupName=options["--log-group-name"],
            **(
                {"retentionInDays": int(options["--retention-in-days"])}
                if "--retention-in-days" in options
                else {}
            ),
        )
    (group,) = [
        g
        for g in logs.describe_log_groups(logGroupNamePrefix="/aws/lambda/nodecycle/drain")["logGroups"]
        if g["logGroupName"] == "/aws/lambda/nodecycle/drain"
    ]
    assert group["retentionInDays"] == 14
    assert all(f.status is Status.OK for f in log_findings(doctor))
