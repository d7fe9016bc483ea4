"""A hook's notification wrapped by SNS on its way to the intake queue: the hook notifies a topic, and the queue is
subscribed to it without raw message delivery (SNS's default), so each message is the topic's envelope (Type
Notification, TopicArn, Message: the notification as a JSON string, a signature). Before, intake rejected each as
neither an EventBridge event nor a hook notification (unknown-shape, an ERROR and LifecycleEventsRejected): every
action of the hook was dropped and left to the sweeper's adoption minutes later, its heartbeat timeout running,
and the hook's test notification paged as a rejection too. The envelope's message is now taken in as if it had
come alone, trusted as little (checked as every message of the queue is: its account, its shape)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from types import ModuleType
from typing import Any

import pytest

from nodecycle.contracts.events import from_sqs_body, names_many
from tests.functions.intake.test_intake_function import records, work
from tests.functions.intake.test_rintake_deliveries import INSTANCE, errors, hook_notification
from tests.support.emf import metric
from tests.support.events import load_event, sqs_bodies, sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack


def sns_wrapped(message: Mapping[str, Any]) -> dict[str, Any]:
    """``message`` as SNS delivers it to a queue subscribed without raw message delivery: its envelope, the
    message a JSON string in it."""
    return {
        "Type": "Notification",
        "MessageId": str(uuid.uuid4()),
        "TopicArn": "arn:aws:sns:eu-west-1:123456789012:nodecycle-hooks",
        "Subject": "Auto Scaling:  Lifecycle action 'TERMINATING' for instance i-0a1b2c3d4e5f60718",
        "Message": json.dumps(message),
        "Timestamp": "2026-12-06T11:00:00.000Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLE==",
        "SigningCertURL": "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-0000.pem",
        "UnsubscribeURL": "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe",
    }


def load_event_body(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(load_event(name)["Records"][0]["body"])
    return data


def test_a_hook_notification_wrapped_by_sns_is_taken_in_as_the_notification(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the hook's notification and its test notification, each wrapped by SNS (the queue subscribed to the
    # hook's topic without raw message delivery), beside the same action unwrapped
    batch = sqs_event(
        sns_wrapped(load_event_body("sqs-test-notification.json")),
        sns_wrapped(hook_notification()),
        hook_notification(),
    )

    # When intake takes the batch in
    response = intake_fn.handler(batch, LambdaContext())

    # Then the action is one lifecycle with one first step (the unwrapped copy a duplicate), the test
    # notification is acknowledged, and nothing is rejected or retried
    assert response == {"batchItemFailures": []}
    (record,) = records()
    assert record["instance_id"] == INSTANCE
    assert len(work(stack.drain_queue)) == 1
    output = capsys.readouterr().out
    assert errors(output) == []
    assert metric(output, "LifecycleEventsRejected") == 0
    assert metric(output, "LifecycleEventsDuplicate") == 1


def test_an_sns_envelope_from_another_account_is_refused_by_its_message(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a hook notification of another account wrapped by SNS
    batch = sqs_event(sns_wrapped(hook_notification(AccountId="210987654321")))

    # When intake takes it in, Then it is refused as from elsewhere, not taken in
    assert intake_fn.handler(batch, LambdaContext()) == {"batchItemFailures": []}
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="wrong-account") == 1


@pytest.mark.parametrize(
    ("message", "reason", "says"),
    [
        ({"Service": "AWS Auto Scaling"}, "invalid-field", "not a string"),
        ("{truncated", "malformed-json", "not JSON"),
        (json.dumps(sns_wrapped({"Event": "autoscaling:TEST_NOTIFICATION"})), "unknown-shape", "TopicArn"),
    ],
    ids=["message an object", "message not JSON", "an envelope in an envelope"],
)
def test_an_sns_envelope_whose_message_is_not_one_is_rejected_naming_it(
    intake_fn: ModuleType,
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    message: Any,
    reason: str,
    says: str,
) -> None:
    envelope = {**sns_wrapped({}), "Message": message}
    assert intake_fn.handler(sqs_event(envelope), LambdaContext()) == {"batchItemFailures": []}
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason=reason) == 1
    (error,) = errors(output)
    assert says in error


def test_an_aws_health_event_wrapped_by_sns_is_taken_in_after_the_other_records() -> None:
    # (a Health event names many instances: its batch's other records go first, see the handler)
    health = json.dumps(sns_wrapped(load_event("eventbridge-health-scheduled-retirement.json")))
    assert names_many(health)
    assert not names_many(json.dumps(sns_wrapped(hook_notification())))
    assert not names_many(json.dumps({**sns_wrapped({}), "Message": "{truncated"}))


@pytest.mark.parametrize(
    "event",
    [
        "autoscaling:EC2_INSTANCE_LAUNCH",
        "autoscaling:EC2_INSTANCE_LAUNCH_ERROR",
        "autoscaling:EC2_INSTANCE_TERMINATE",
        "autoscaling:EC2_INSTANCE_TERMINATE_ERROR",
    ],
)
def test_a_groups_scaling_notification_by_the_same_topic_is_acknowledged_not_rejected(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], event: str
) -> None:
    # Given what a group's notification configuration sends (to SNS topics only) on a topic the queue subscribes
    # to: news of a launch or a termination (or of its failure), no lifecycle action
    batch = sqs_event(sns_wrapped(scaling_notification(event)))

    # When intake takes it in, Then it is acknowledged as a test notification is: nothing written or sent, no
    # error, no rejection (each would page: RejectedEventsAlarm)
    assert intake_fn.handler(batch, LambdaContext()) == {"batchItemFailures": []}
    assert records() == []
    assert work(stack.drain_queue) == []
    output = capsys.readouterr().out
    assert errors(output) == []
    assert metric(output, "LifecycleEventsRejected") == 0
    assert f"{event} for group nodes-general acknowledged" in output


def scaling_notification(event: str) -> dict[str, Any]:
    """A group's scaling notification, as Auto Scaling writes one (its user guide's example)."""
    return {
        "Progress": 50,
        "AccountId": "123456789012",
        "Description": "Terminating EC2 instance: i-0a1b2c3d4e5f60718",
        "RequestId": str(uuid.uuid4()),
        "EndTime": "2026-12-06T11:00:40.517Z",
        "AutoScalingGroupARN": "arn:aws:autoscaling:eu-west-1:123456789012:autoScalingGroup:1:autoScalingGroupName/nodes-general",
        "ActivityId": str(uuid.uuid4()),
        "StartTime": "2026-12-06T11:00:00.214Z",
        "Service": "AWS Auto Scaling",
        "Time": "2026-12-06T11:00:40.517Z",
        "EC2InstanceId": INSTANCE,
        "StatusCode": "InProgress",
        "StatusMessage": "",
        "Details": {"Subnet ID": "subnet-0123456789abcdef0", "Availability Zone": "eu-west-1a"},
        "AutoScalingGroupName": "nodes-general",
        "Cause": "At 2026-12-06T11:00:00Z an instance was taken out of service in response to a scale-in.",
        "Event": event,
    }


@pytest.mark.parametrize("kind", ["SubscriptionConfirmation", "UnsubscribeConfirmation"])
def test_an_sns_subscriptions_confirmation_is_rejected_saying_what_it_is(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    # Given what SNS sends a queue subscribed to a topic (or unsubscribed from it) that an operator must confirm
    topic = "arn:aws:sns:eu-west-1:210987654321:nodecycle-hooks"
    confirmation = {
        "Type": kind,
        "MessageId": str(uuid.uuid4()),
        "Token": "2336412f37f" * 10,
        "TopicArn": topic,
        "Message": f"You have chosen to subscribe to the topic {topic}.",
        "SubscribeURL": f"https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&TopicArn={topic}",
        "Timestamp": "2026-12-06T11:00:00.000Z",
        "SignatureVersion": "1",
        "Signature": "EXAMPLE==",
        "SigningCertURL": "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-0000.pem",
    }

    # When intake takes it in, Then it is rejected (an operator must act on it) by an error that says what it is
    # and of which topic, not only which keys it has
    assert intake_fn.handler(sqs_event(confirmation), LambdaContext()) == {"batchItemFailures": []}
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="unknown-shape") == 1
    (error,) = errors(output)
    assert f"an SNS {kind} of topic {topic!r}" in error
    assert "SubscribeURL" in error


def test_the_sample_by_sns_is_the_sample_hook_notification() -> None:
    # (events/sqs-sns-hook-terminate.json, for sam local invoke: the terminate sample's action, by its topic)
    (wrapped,) = sqs_bodies("sqs-sns-hook-terminate.json")
    (plain,) = sqs_bodies("sqs-hook-terminate.json")
    assert from_sqs_body(wrapped) == from_sqs_body(plain)
