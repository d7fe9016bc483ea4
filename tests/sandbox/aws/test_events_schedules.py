"""PutRule refuses a schedule expression EventBridge refuses ("Parameter ScheduleExpression is not valid."): a rate
whose value is not a positive whole number, or whose unit does not agree with it ("If the value is equal to 1,
then the unit must be singular. If the value is greater than 1, the unit must be plural. For example, rate(1 hours)
and rate(5 hour) aren't valid", EventBridge user guide, rate expressions reference), and a cron without its six
fields or that gives both a day of the month and a day of the week (one of them must be "?"). moto took any
rate(<digits> <unit>) and any cron(...)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.runner.functions import rate_seconds
from tests.sandbox.aws.conftest import REGION

REFUSED = [
    "rate(1 minutes)",
    "rate(5 minute)",
    "rate(0 minutes)",
    "rate( minutes)",
    "rate(2.5 minutes)",
    "rate(1 second)",
    "cron(0 12 * * *)",  # five fields
    "cron(0 12 * * MON *)",  # a day of the month and a day of the week
    "cron(0 12 ? * ? *)",
]
TAKEN = [
    "rate(1 minute)",
    "rate(5 minutes)",
    "rate(1 hour)",
    "rate(2 days)",
    "cron(0 12 * * ? *)",
    "cron(0/5 * ? * MON-FRI *)",
]


@pytest.fixture
def events() -> Iterator[Any]:
    install()
    with mock_aws():
        yield boto3.client("events", region_name=REGION)


@pytest.mark.parametrize("expression", REFUSED)
def test_a_schedule_expression_eventbridge_refuses_is_refused(events: Any, expression: str) -> None:
    with pytest.raises(ClientError) as refused:
        events.put_rule(Name="sweep", ScheduleExpression=expression)

    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert refused.value.response["Error"]["Message"] == "Parameter ScheduleExpression is not valid."
    assert events.list_rules()["Rules"] == []


@pytest.mark.parametrize("expression", TAKEN)
def test_a_valid_schedule_expression_is_taken(events: Any, expression: str) -> None:
    events.put_rule(Name="sweep", ScheduleExpression=expression)

    assert events.describe_rule(Name="sweep")["ScheduleExpression"] == expression


@pytest.mark.parametrize("expression", [e for e in REFUSED if e.startswith("rate(")])
def test_the_runner_refuses_a_schedule_event_with_such_a_rate(expression: str) -> None:
    # (the runner reads the template's schedules before it creates their rules: a stack with one fails there)
    with pytest.raises(ValueError, match="ScheduleExpression"):
        rate_seconds(expression)
    assert rate_seconds("rate(1 minute)") == 60.0
    assert rate_seconds("rate(5 minutes)") == 300.0
