"""A hook whose target is an SNS topic: Auto Scaling publishes to it as the hook's role (sns:Publish), and SNS
delivers to the topic's SQS subscriptions, in its envelope or raw, where the queue's policy lets the topic in."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.group import HookSpec

from .conftest import Emulation, _client

ACCOUNT = "123456789012"
ENVELOPE_FIELDS = [
    "Type",
    "MessageId",
    "TopicArn",
    "Subject",
    "Message",
    "Timestamp",
    "SignatureVersion",
    "Signature",
    "SigningCertURL",
    "UnsubscribeURL",
]
TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "autoscaling.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }
    ],
}


def _queue(aws: Emulation, name: str, *, allow_topic: str | None) -> tuple[str, str]:
    """A queue (url, arn) whose policy lets ``allow_topic`` send to it (SNS's subscription needs it), or none."""
    url = aws.sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    if allow_topic is not None:
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": "sns.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": arn,
                    "Condition": {"ArnEquals": {"aws:SourceArn": allow_topic}},
                }
            ],
        }
        aws.sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": json.dumps(policy)})
    return url, arn


def _bodies(aws: Emulation, url: str) -> list[Any]:
    messages = aws.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
    return [json.loads(m["Body"]) for m in messages]


def _role(aws: Emulation, name: str, statement: dict[str, Any]) -> str:
    arn = f"arn:aws:iam::{ACCOUNT}:role/{name}"
    document = {"Version": "2012-10-17", "Statement": [statement]}
    aws.control.register_identities(
        roles=[{"arn": arn, "trust": TRUST, "policies": [{"source": name, "document": document}]}], keys=[]
    )
    return arn


def test_a_topic_delivers_the_hooks_notifications_in_snss_envelope_or_raw(aws: Emulation) -> None:
    # Given a topic, one queue subscribed without raw message delivery (SNS's default), one with it, both
    # queues' policies letting the topic send
    sns = _client("sns")
    topic = sns.create_topic(Name="hooks")["TopicArn"]
    wrapped_url, wrapped_arn = _queue(aws, "wrapped", allow_topic=topic)
    raw_url, raw_arn = _queue(aws, "raw", allow_topic=topic)
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=wrapped_arn)
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=raw_arn, Attributes={"RawMessageDelivery": "true"})

    # When a launch hook notifying the topic is put, and an instance launches
    group = aws.group(
        HookSpec("ready", LAUNCHING, 60, target_arn=topic, role_arn=f"arn:aws:iam::{ACCOUNT}:role/admin")
    )
    group.set_desired(1)
    instance = group.in_state("Pending:Wait")[0]

    # Then the raw queue holds the test notification and the action as an SQS hook would get them
    test, action = _bodies(aws, raw_url)
    assert test["Event"] == "autoscaling:TEST_NOTIFICATION"
    assert (action["LifecycleTransition"], action["EC2InstanceId"]) == (LAUNCHING, instance)

    # And the other holds the same two, each in SNS's envelope (its fields in SNS's order), with the Subject
    # Auto Scaling publishes it with
    envelopes = _bodies(aws, wrapped_url)
    assert [list(e) for e in envelopes] == [ENVELOPE_FIELDS, ENVELOPE_FIELDS]
    assert [json.loads(e["Message"]) for e in envelopes] == [test, action]
    assert [e["Subject"] for e in envelopes] == [
        'Auto Scaling: test notification for group "workers"',
        f"Auto Scaling:  Lifecycle action 'LAUNCHING' for instance {instance} in progress.",
    ]
    for envelope in envelopes:
        assert (envelope["Type"], envelope["TopicArn"], envelope["SignatureVersion"]) == (
            "Notification",
            topic,
            "1",
        )
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", envelope["Timestamp"])
        assert envelope["SigningCertURL"].startswith("https://sns.eu-west-1.amazonaws.com/")
        assert envelope["UnsubscribeURL"].startswith(
            "https://sns.eu-west-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=" + topic + ":"
        )
    assert envelopes[0]["MessageId"] != envelopes[1]["MessageId"]


def test_a_queue_whose_policy_does_not_let_the_topic_in_gets_nothing_and_the_hook_is_not_told(
    aws: Emulation,
) -> None:
    # Given a topic, a queue without a policy and one whose policy lets another topic in, both subscribed
    sns = _client("sns")
    topic = sns.create_topic(Name="hooks")["TopicArn"]
    bare_url, bare_arn = _queue(aws, "bare", allow_topic=None)
    other_url, other_arn = _queue(aws, "other", allow_topic=topic + "-other")
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=bare_arn)
    sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=other_arn)

    # When a terminate hook notifying the topic is put (the topic accepts the test notification), and an
    # instance terminates
    group = aws.group(
        HookSpec(
            "drain", TERMINATING, 60, "CONTINUE", target_arn=topic, role_arn=f"arn:aws:iam::{ACCOUNT}:role/x"
        ),
        size=1,
    )
    victim = group.in_state("InService")[0]
    group.terminate(victim)

    # Then neither queue got anything: SNS, sending as sns.amazonaws.com, is refused by the queue's own policy
    assert _bodies(aws, bare_url) == []
    assert _bodies(aws, other_url) == []
    assert group.in_state("Terminating:Wait") == [victim]


def test_the_hooks_role_must_allow_sns_publish_on_the_topic(aws: Emulation) -> None:
    # Given a topic, a role allowed only what the stack's HookNotificationRole is allowed (SQS), and one allowed
    # sns:Publish on the topic
    sns = _client("sns")
    topic = sns.create_topic(Name="hooks")["TopicArn"]
    sqs_only = _role(
        aws,
        "sns-test-sqs-only",
        {"Effect": "Allow", "Action": ["sqs:SendMessage", "sqs:GetQueueUrl"], "Resource": "*"},
    )
    publisher = _role(
        aws, "sns-test-publisher", {"Effect": "Allow", "Action": "sns:Publish", "Resource": topic}
    )
    aws.group()

    def put(role: str, target: str = topic) -> None:
        aws.autoscaling.put_lifecycle_hook(
            AutoScalingGroupName="workers",
            LifecycleHookName="ready",
            LifecycleTransition=LAUNCHING,
            NotificationTargetARN=target,
            RoleARN=role,
        )

    # When the hook is put with each role, and with a topic that does not exist
    with pytest.raises(ClientError) as sqs_only_refused:
        put(sqs_only)
    with pytest.raises(ClientError) as missing_refused:
        put(publisher, topic + "-gone")
    put(publisher)

    # Then the role without sns:Publish and the missing topic are refused as AWS refuses them (the test
    # notification could not be published); the publisher's hook is put
    for refused in (sqs_only_refused, missing_refused):
        assert refused.value.response["Error"]["Code"] == "ValidationError"
        assert (
            "Unable to publish test message to notification target"
            in refused.value.response["Error"]["Message"]
        )
    (hook,) = aws.autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="workers")["LifecycleHooks"]
    assert hook["NotificationTargetARN"] == topic


def test_a_put_lifecycle_hook_refused_for_its_test_notification_changes_no_hook(aws: Emulation) -> None:
    # Given a group whose launch hook notifies EventBridge only, a topic, and a role that may not publish to it
    sns = _client("sns")
    topic = sns.create_topic(Name="hooks")["TopicArn"]
    sqs_only = _role(
        aws, "sns-test-refused", {"Effect": "Allow", "Action": "sqs:SendMessage", "Resource": "*"}
    )
    aws.group(HookSpec("ready", LAUNCHING, 60))
    before = aws.autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="workers")["LifecycleHooks"]

    # When the hook is put again to notify the topic as that role, with another heartbeat timeout, and a new
    # terminate hook likewise: both refused (the test notification cannot be published)
    for name, transition in (("ready", LAUNCHING), ("drain", TERMINATING)):
        with pytest.raises(ClientError):
            aws.autoscaling.put_lifecycle_hook(
                AutoScalingGroupName="workers",
                LifecycleHookName=name,
                LifecycleTransition=transition,
                HeartbeatTimeout=120,
                NotificationTargetARN=topic,
                RoleARN=sqs_only,
            )

    # Then the hooks are as they were, as AWS leaves them after a failed call: no target, no role, the same
    # timeout, and no new hook
    after = aws.autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="workers")["LifecycleHooks"]
    assert after == before
