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

from nodecycle.domain.model import Transition
from tests.functions.intake.test_disruption_intake import health_event, launch, records, schedule
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


def as_documented(instance: str, starts: datetime) -> dict[str, Any]:
    """AWS Health's scheduled retirement of ``instance`` in the shape of the EventBridge schema's own sample
    ("Account-specific AWS Health Event - Amazon EC2 Instance Retirement", health/latest/ug/
    aws-health-events-eventbridge-schema.html): no ``resources`` in the envelope, the instance named by its ARN, the
    detail's scope, affected account and region, and its page."""
    when = starts.strftime("%a, %d %b %Y %H:%M:%S GMT")
    return {
        "version": "0",
        "id": "7bf73129-1428-4cd3-a780-95db273d1602",
        "detail-type": "AWS Health Event",
        "source": "aws.health",
        "account": "123456789012",
        "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": "eu-west-1",
        "detail": {
            "eventArn": "arn:aws:health:eu-west-1::event/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED_90353408594353983",
            "service": "EC2",
            "eventTypeCode": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
            "eventTypeCategory": "scheduledChange",
            "eventScopeCode": "ACCOUNT_SPECIFIC",
            "communicationId": "1234abc01232a4012345678-1",
            "startTime": when,
            "lastUpdatedTime": when,
            "statusCode": "open",
            "eventRegion": "eu-west-1",
            "eventDescription": [{"language": "en_US", "latestDescription": "retirement"}],
            "affectedEntities": [
                {
                    "entityValue": f"arn:aws:ec2:eu-west-1:123456789012:instance/{instance}",
                    "lastUpdatedTime": when,
                    "status": "PENDING",
                }
            ],
            "affectedAccount": "123456789012",
            "page": "1",
            "totalPages": "1",
            "backupEvent": "false",
            "personas": ["OPERATIONS"],
            "actionability": "ACTION_REQUIRED",
        },
    }


def test_a_retirement_in_the_shape_aws_documents_drains_its_instance(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance of a managed group that EC2 has scheduled for retirement in three days
    instance = launch()
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    schedule(instance, starts)

    # When AWS Health tells of it in the shape its EventBridge schema documents (the instance named by its ARN, no
    # `resources` in the envelope)
    intake_fn.handler(as_documented(instance, starts), LambdaContext())

    # Then the instance's drain is planned for that maintenance, as for the bare instance id
    (record,) = records()
    assert record["instance_id"] == instance
    assert record["transition"] == Transition.SCHEDULED_CHANGE.value
    assert rejections(capsys.readouterr().out) == {}
