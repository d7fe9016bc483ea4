"""AWS Health's scheduled changes of EC2 that name no instance. The rule takes every EC2 scheduled change of the
account and region (``detail.service`` EC2, ``eventTypeCategory`` scheduledChange), and not all of them are of
instances: a Dedicated Host's maintenance or retirement names the host (``AWS_EC2_DEDICATED_HOST_*_SCHEDULED``, its
entity ``h-...``), and a public event names no resource at all (AWS Health's EventBridge schema: ``resources`` "is
empty if there are no resources referenced"; a rule on ``aws.health`` receives public events beside the account's).
Such an event is AWS's own and tells of no node: nothing to drain, nothing wrong."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from tests.functions.intake.test_disruption_intake import health_event, launch, records
from tests.functions.intake.test_rintake_health_updates import rejections, warnings_and_errors
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

HOST = "h-0123456789abcdef0"


def of_a_dedicated_host(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` as AWS Health tells of a Dedicated Host's scheduled maintenance: the host its one entity."""
    code = "AWS_EC2_DEDICATED_HOST_NETWORK_MAINTENANCE_SCHEDULED"
    detail = {
        **event["detail"],
        "eventArn": f"arn:aws:health:eu-west-1::event/EC2/{code}/{code}_ABC123",
        "eventTypeCode": code,
        "affectedEntities": [{"entityValue": HOST, "tags": {}}],
    }
    return {**event, "resources": [HOST], "detail": detail}


def public(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` as AWS Health sends a public event: no resource, no affected entity."""
    detail = {key: value for key, value in event["detail"].items() if key != "affectedEntities"}
    return {**event, "resources": [], "detail": {**detail, "eventScopeCode": "PUBLIC"}}


@pytest.mark.parametrize("told", [of_a_dedicated_host, public], ids=["a dedicated host's", "a public event"])
def test_an_ec2_scheduled_change_that_names_no_instance_is_acknowledged_not_rejected(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], told: Any
) -> None:
    # Given an instance of a managed group (nothing of it is scheduled), and AWS Health's scheduled change of EC2
    # that names no instance: a Dedicated Host's maintenance, or a public event
    launch()
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    event = told(health_event("i-0a1b2c3d4e5f60718", starts))

    # When the rule delivers it
    intake_fn.handler(event, LambdaContext())

    # Then nothing is drained, and nothing is rejected: every rejection pages (RejectedEventsAlarm), whose runbook
    # reads one as a forged or broken message, and this one is AWS's, about something other than an instance
    assert records() == []
    output = capsys.readouterr().out
    assert rejections(output) == {}
    assert warnings_and_errors(output) == []
