"""The exact shapes Auto Scaling sends for lifecycle actions: EventBridge events and SQS message bodies."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from nodecycle_sandbox.aws.records import LAUNCHING

_DETAIL_TYPES = {
    LAUNCHING: "EC2 Instance-launch Lifecycle Action",
    "autoscaling:EC2_INSTANCE_TERMINATING": "EC2 Instance-terminate Lifecycle Action",
}


def _iso(at: float, *, millis: bool) -> str:
    moment = datetime.fromtimestamp(at, tz=UTC)
    if millis:
        return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def eventbridge_event(
    *,
    at: float,
    account: str,
    region: str,
    group_arn: str,
    group: str,
    hook: str,
    instance_id: str,
    transition: str,
    token: str,
    metadata: str | None,
    origin: str,
    destination: str,
) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "LifecycleActionToken": token,
        "AutoScalingGroupName": group,
        "LifecycleHookName": hook,
        "EC2InstanceId": instance_id,
        "LifecycleTransition": transition,
    }
    if metadata is not None:
        detail["NotificationMetadata"] = metadata
    detail["Origin"] = origin
    detail["Destination"] = destination
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": _DETAIL_TYPES[transition],
        "source": "aws.autoscaling",
        "account": account,
        "time": _iso(at, millis=False),
        "region": region,
        "resources": [group_arn],
        "detail": detail,
    }


def sqs_lifecycle_body(
    *,
    at: float,
    account: str,
    group: str,
    hook: str,
    instance_id: str,
    transition: str,
    token: str,
    metadata: str | None,
    origin: str,
    destination: str,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "Origin": origin,
        "LifecycleHookName": hook,
        "Destination": destination,
        "AccountId": account,
        "RequestId": str(uuid.uuid4()),
        "LifecycleTransition": transition,
        "AutoScalingGroupName": group,
        "Service": "AWS Auto Scaling",
        "Time": _iso(at, millis=True),
        "EC2InstanceId": instance_id,
        "LifecycleActionToken": token,
    }
    if metadata is not None:
        body["NotificationMetadata"] = metadata
    return body


def sqs_test_notification(*, at: float, account: str, group: str, group_arn: str) -> dict[str, Any]:
    return {
        "AccountId": account,
        "RequestId": str(uuid.uuid4()),
        "AutoScalingGroupARN": group_arn,
        "AutoScalingGroupName": group,
        "Service": "AWS Auto Scaling",
        "Event": "autoscaling:TEST_NOTIFICATION",
        "Time": _iso(at, millis=True),
    }
