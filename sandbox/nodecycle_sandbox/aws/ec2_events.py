"""The exact shapes EC2 and AWS Health put on the default event bus for disruptions no hook waits for.

- ``EC2 Spot Instance Interruption Warning``: its resource names the instance by its zone (``arn:aws:ec2:
  eu-west-1b:instance/i-...``, as EC2 writes it), no account;
- ``EC2 Instance Rebalance Recommendation``: the same resource form;
- ``EC2 Instance State-change Notification``: the instance's ARN with region and account;
- ``AWS Health Event`` of category ``scheduledChange`` for EC2, as AWS Health's EventBridge schema documents its
  sample retirement (health/latest/ug/aws-health-events-eventbridge-schema.html): no ``resources`` in the envelope,
  each instance named by its ARN in ``affectedEntities`` (older samples name it by its bare id), the detail's scope,
  affected account and region, page and backup flag; times in RFC 1123 (``Mon, 07 Dec 2026 10:00:00 GMT``).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from email.utils import format_datetime
from typing import Any

SPOT_WARNING = "EC2 Spot Instance Interruption Warning"
REBALANCE = "EC2 Instance Rebalance Recommendation"
STATE_CHANGE = "EC2 Instance State-change Notification"
HEALTH_EVENT = "AWS Health Event"

# AWS Health's event type code for each scheduled-event code of DescribeInstanceStatus.
HEALTH_CODES = {
    "instance-retirement": "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED",
    "instance-stop": "AWS_EC2_INSTANCE_STOP_SCHEDULED",
    "instance-reboot": "AWS_EC2_INSTANCE_REBOOT_MAINTENANCE_SCHEDULED",
    "system-reboot": "AWS_EC2_SYSTEM_REBOOT_MAINTENANCE_SCHEDULED",
    "system-maintenance": "AWS_EC2_SYSTEM_MAINTENANCE_EVENT",
}
DESCRIPTIONS = {
    "instance-retirement": "The instance is running on degraded hardware",
    "instance-stop": "The instance is running on degraded hardware",
    "instance-reboot": "scheduled reboot",
    "system-reboot": "scheduled reboot",
    "system-maintenance": "scheduled maintenance",
}


def _time(at: float) -> str:
    return datetime.fromtimestamp(at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _rfc1123(at: float) -> str:
    return format_datetime(datetime.fromtimestamp(at, tz=UTC).replace(microsecond=0), usegmt=True)


def _envelope(
    *, source: str, detail_type: str, at: float, account: str, region: str, resources: list[str]
) -> dict[str, Any]:
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": detail_type,
        "source": source,
        "account": account,
        "time": _time(at),
        "region": region,
        "resources": resources,
    }


def spot_interruption_warning(
    *, at: float, account: str, region: str, zone: str, instance_id: str, action: str = "terminate"
) -> dict[str, Any]:
    event = _envelope(
        source="aws.ec2",
        detail_type=SPOT_WARNING,
        at=at,
        account=account,
        region=region,
        resources=[f"arn:aws:ec2:{zone}:instance/{instance_id}"],
    )
    event["detail"] = {"instance-id": instance_id, "instance-action": action}
    return event


def rebalance_recommendation(
    *, at: float, account: str, region: str, zone: str, instance_id: str
) -> dict[str, Any]:
    event = _envelope(
        source="aws.ec2",
        detail_type=REBALANCE,
        at=at,
        account=account,
        region=region,
        resources=[f"arn:aws:ec2:{zone}:instance/{instance_id}"],
    )
    event["detail"] = {"instance-id": instance_id}
    return event


def state_change(*, at: float, account: str, region: str, instance_id: str, state: str) -> dict[str, Any]:
    event = _envelope(
        source="aws.ec2",
        detail_type=STATE_CHANGE,
        at=at,
        account=account,
        region=region,
        resources=[instance_arn(region=region, account=account, instance_id=instance_id)],
    )
    event["detail"] = {"instance-id": instance_id, "state": state}
    return event


def health_scheduled_change(
    *,
    at: float,
    account: str,
    region: str,
    instance_ids: list[str],
    code: str,
    starts: float,
    ends: float,
    status: str = "upcoming",
    event_arn: str | None = None,
    resolved: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """``status``: the Health event's (``upcoming``, ``open``, ``closed``); ``event_arn``: the event's own, for an
    update of it (Health sends its event again, a new EventBridge id under the same ARN, when it changes it);
    ``resolved``: the instances whose part of it is over (their entity's status ``RESOLVED``; the others'
    ``PENDING``). One event names many instances, each with its own status: AWS Health's entity status codes are
    IMPAIRED, UNIMPAIRED, UNKNOWN, PENDING and RESOLVED (health/latest/APIReference, AccountEntityAggregate), and
    its planned events list each resource PENDING until its change is done, RESOLVED after (as AWS Batch's guide to
    Health's planned lifecycle events says), while the event stays open for the others."""
    type_code = HEALTH_CODES[code]
    event = _envelope(
        source="aws.health", detail_type=HEALTH_EVENT, at=at, account=account, region=region, resources=[]
    )
    del event["resources"]  # (the documented sample has none: not a required field)
    event["detail"] = {
        "eventArn": event_arn
        or f"arn:aws:health:{region}::event/EC2/{type_code}/{type_code}_{uuid.uuid4().hex[:12].upper()}",
        "service": "EC2",
        "eventTypeCode": type_code,
        "eventTypeCategory": "scheduledChange",
        "eventScopeCode": "ACCOUNT_SPECIFIC",
        "communicationId": f"{uuid.uuid4().hex}-1",
        "startTime": _rfc1123(starts),
        "endTime": _rfc1123(ends),
        "lastUpdatedTime": _rfc1123(at),
        "statusCode": status,
        "eventRegion": region,
        "eventDescription": [{"language": "en_US", "latestDescription": DESCRIPTIONS[code]}],
        "affectedEntities": [
            {
                "entityValue": instance_arn(region=region, account=account, instance_id=instance),
                "lastUpdatedTime": _rfc1123(at),
                "status": "RESOLVED" if instance in resolved else "PENDING",
            }
            for instance in instance_ids
        ],
        "affectedAccount": account,
        "page": "1",
        "totalPages": "1",
        "backupEvent": "false",
        "personas": ["OPERATIONS"],
    }
    return event


def instance_arn(*, region: str, account: str, instance_id: str) -> str:
    return f"arn:aws:ec2:{region}:{account}:instance/{instance_id}"
