"""``nodecycle doctor``'s check of the stack's EventBridge rules (moto): one rule it may not read does not hide
the state of the other."""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_cli.deployment import from_description
from nodecycle_cli.doctor import Doctor
from nodecycle_cli.doctor.findings import Status, exit_status

REGION = "eu-west-1"
LIFECYCLE_RULE = "nodecycle-LifecycleActions-1A2B3C"
SWEEP_RULE = "nodecycle-Sweep-4D5E6F"


@pytest.fixture
def session() -> Iterator[boto3.Session]:
    with mock_aws():
        yield boto3.Session(region_name=REGION)


def test_a_rule_that_may_not_be_read_does_not_hide_that_the_other_is_disabled(session: boto3.Session) -> None:
    # Given a stack whose sweeper schedule an operator disabled, and a role whose DescribeRule is refused on the
    # lifecycle actions' rule (a permissions boundary, a service control policy scoped to it)
    events = session.client("events")
    events.put_rule(Name=LIFECYCLE_RULE, EventPattern='{"source": ["aws.autoscaling"]}')
    events.put_rule(Name=SWEEP_RULE, ScheduleExpression="rate(5 minutes)")
    events.disable_rule(Name=SWEEP_RULE)

    def refuse(params: dict[str, Any], **_: Any) -> None:
        if params.get("Name") == LIFECYCLE_RULE:
            raise ClientError(
                {"Error": {"Code": "AccessDeniedException", "Message": "not authorized"}}, "DescribeRule"
            )

    session.events.register("provide-client-params.events.DescribeRule", refuse)
    described = {
        "StackName": "nodecycle",
        "Outputs": [
            {"OutputKey": "LifecycleRuleName", "OutputValue": LIFECYCLE_RULE},
            {"OutputKey": "SweepRuleName", "OutputValue": SWEEP_RULE},
        ],
    }
    args = argparse.Namespace(group=[], cluster=None, rbac=None, verbose=False)

    # When the doctor examines it
    findings = [
        f
        for f in Doctor(args, session, from_description(described, REGION)).examine()
        if f.check.startswith("eventbridge.rule")
    ]

    # Then the disabled schedule is a problem (exit status 1), and only the refused rule is said to be unchecked
    by_check = {f.check: f for f in findings}
    assert by_check["eventbridge.rule.sweeper schedule"].status is Status.PROBLEM
    assert (
        by_check["eventbridge.rule.sweeper schedule"].what
        == f"EventBridge rule {SWEEP_RULE} (sweeper schedule) is DISABLED"
    )
    assert by_check["eventbridge.rule.lifecycle actions"].status is Status.UNCHECKED
    assert exit_status(findings) == 1
