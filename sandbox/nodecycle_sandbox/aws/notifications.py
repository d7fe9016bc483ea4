"""The exact shapes Auto Scaling sends for lifecycle actions: EventBridge events and SQS message bodies, and what
an SNS topic puts on a subscribed queue for one (the body in its envelope, unless raw message delivery is on)."""

from __future__ import annotations

import base64
import json
import os
import time
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


def _as_eventbridge_writes(metadata: str) -> Any:
    """A hook's NotificationMetadata as its EventBridge event carries it: metadata that is a JSON object (or array)
    as that JSON value, not as its text, any other metadata as its text. Public code written against AWS reads it
    so: rules whose patterns match keys inside ``detail.NotificationMetadata`` (which EventBridge matches in JSON
    objects only), handlers that index ``event["detail"]["NotificationMetadata"]["key"]``, sample events with
    ``"NotificationMetadata": {}``. A hook's notification on an SQS queue carries the text, as the hook holds it
    (``sqs_lifecycle_body``)."""
    try:
        value = json.loads(metadata)
    except ValueError:
        return metadata
    return value if isinstance(value, (dict, list)) else metadata


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
    action: str = "",
) -> dict[str, Any]:
    detail: dict[str, Any] = {
        "LifecycleActionToken": token,
        "AutoScalingGroupName": group,
        "LifecycleHookName": hook,
        "EC2InstanceId": instance_id,
        "LifecycleTransition": transition,
    }
    if metadata is not None:
        detail["NotificationMetadata"] = _as_eventbridge_writes(metadata)
    detail["Origin"] = origin
    detail["Destination"] = destination
    if action:  # (AWS documents the field for a root volume replacement's events: none other carries it)
        detail["Action"] = action
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
    origin: str | None,
    destination: str | None,
) -> dict[str, Any]:
    """A hook's notification to its queue or topic; without Origin and Destination when they are None (see
    LifecycleEmulator.notifications_tell_origin)."""
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
    if origin is None:
        del body["Origin"]
    if destination is None:
        del body["Destination"]
    if metadata is not None:
        body["NotificationMetadata"] = metadata
    return body


def forged_hook_notification(
    *,
    account: str,
    group: str,
    hook: str,
    instance_id: str,
    transition: str,
    token: str,
    at: float | None = None,
) -> dict[str, Any]:
    """A hook notification as anyone allowed sqs:SendMessage on an intake queue can send one: well formed, the move
    ``transition`` tells (a launch from EC2 into the group, a termination from the group to EC2), no metadata, at
    ``at`` (now). No hook sent it: its token, instance, group or hook name are whatever the sender chose."""
    launch = transition == LAUNCHING
    return sqs_lifecycle_body(
        at=time.time() if at is None else at,
        account=account,
        group=group,
        hook=hook,
        instance_id=instance_id,
        transition=transition,
        token=token,
        metadata=None,
        origin="EC2" if launch else "AutoScalingGroup",
        destination="AutoScalingGroup" if launch else "EC2",
    )


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


def sns_subject(body: dict[str, Any]) -> str:
    """The Subject Auto Scaling publishes a hook's notification with (two spaces after the colon, as it writes
    them): "Auto Scaling:  Lifecycle action 'TERMINATING' for instance i-... in progress.", and for the hook's
    test notification 'Auto Scaling: test notification for group "name"'."""
    transition = body.get("LifecycleTransition")
    if not isinstance(transition, str):
        return f'Auto Scaling: test notification for group "{body["AutoScalingGroupName"]}"'
    kind = transition.rsplit("_", 1)[-1]
    return f"Auto Scaling:  Lifecycle action '{kind}' for instance {body['EC2InstanceId']} in progress."


def sns_envelope(
    *, at: float, topic_arn: str, subscription_arn: str, subject: str, message: str
) -> dict[str, Any]:
    """An SNS notification as a subscription without raw message delivery puts it on an SQS queue: its fields in
    SNS's order, the message a string. The signature is random bytes of an RSA signature's length (nothing in
    the sandbox verifies it); SignatureVersion "1", a topic's default."""
    region = topic_arn.split(":")[3]
    host = f"https://sns.{region}.amazonaws.com"
    return {
        "Type": "Notification",
        "MessageId": str(uuid.uuid4()),
        "TopicArn": topic_arn,
        "Subject": subject,
        "Message": message,
        "Timestamp": _iso(at, millis=True),
        "SignatureVersion": "1",
        "Signature": base64.b64encode(os.urandom(256)).decode(),
        "SigningCertURL": f"{host}/SimpleNotificationService-{uuid.uuid4().hex}.pem",
        "UnsubscribeURL": f"{host}/?Action=Unsubscribe&SubscriptionArn={subscription_arn}",
    }
