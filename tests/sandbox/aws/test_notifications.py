"""What Auto Scaling sends: EventBridge events, SQS bodies and the test notification, in AWS's shapes."""

from __future__ import annotations

import json
import re

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.group import HookSpec

from .conftest import Emulation

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def test_a_hook_without_target_sends_eventbridge_events_of_the_real_shape(aws: Emulation) -> None:
    # Given a group with a terminate hook carrying metadata
    group = aws.group(HookSpec("drain", TERMINATING, 60, "CONTINUE", metadata='{"pool":"a"}'), size=1)
    victim = group.in_state("InService")[0]

    # When an instance terminates
    group.terminate(victim)

    # Then EventBridge gets an "EC2 Instance-terminate Lifecycle Action" event as AWS sends it
    (event,) = aws.bus.events
    arn = aws.autoscaling.describe_auto_scaling_groups()["AutoScalingGroups"][0]["AutoScalingGroupARN"]
    assert set(event) == {
        "version",
        "id",
        "detail-type",
        "source",
        "account",
        "time",
        "region",
        "resources",
        "detail",
    }
    assert event["detail-type"] == "EC2 Instance-terminate Lifecycle Action"
    assert (event["source"], event["account"], event["region"]) == (
        "aws.autoscaling",
        "123456789012",
        "eu-west-1",
    )
    assert event["resources"] == [arn]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", event["time"])
    assert UUID.match(event["id"])
    detail = event["detail"]
    assert UUID.match(detail.pop("LifecycleActionToken"))
    assert detail == {
        "AutoScalingGroupName": "workers",
        "LifecycleHookName": "drain",
        "EC2InstanceId": victim,
        "LifecycleTransition": TERMINATING,
        # (metadata that is a JSON object comes as that object, not as its text)
        "NotificationMetadata": {"pool": "a"},
        "Origin": "AutoScalingGroup",
        "Destination": "EC2",
    }


@pytest.mark.parametrize(
    ("metadata", "carried"),
    [
        ("drain-timeout=600", "drain-timeout=600"),
        ('["a", 1]', ["a", 1]),
        ("42", "42"),
        ("{not json", "{not json"),
    ],
)
def test_an_eventbridge_event_carries_json_object_metadata_as_json_and_any_other_as_text(
    aws: Emulation, metadata: str, carried: object
) -> None:
    # Given a group with a terminate hook carrying metadata that is plain text, a JSON array, a JSON number, or
    # text that looks like JSON and is not
    group = aws.group(HookSpec("drain", TERMINATING, 60, "CONTINUE", metadata=metadata), size=1)

    # When an instance terminates
    group.terminate(group.in_state("InService")[0])

    # Then its event carries a JSON object or array as that value, anything else as the hook's text
    (event,) = aws.bus.events
    assert event["detail"]["NotificationMetadata"] == carried


def test_an_sqs_hook_gets_a_test_notification_then_flat_lifecycle_bodies(aws: Emulation) -> None:
    # Given a queue
    url = aws.sqs.create_queue(QueueName="intake")["QueueUrl"]
    arn = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

    # When a launch hook that notifies it is put, and an instance launches
    group = aws.group(
        HookSpec("ready", LAUNCHING, 60, target_arn=arn, role_arn="arn:aws:iam::123456789012:role/r")
    )
    group.set_desired(1)

    # Then the queue holds the test notification, then the lifecycle action
    bodies = [
        json.loads(m["Body"])
        for m in aws.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    ]
    test, action = bodies
    assert test["Event"] == "autoscaling:TEST_NOTIFICATION"
    assert set(test) == {
        "AccountId",
        "RequestId",
        "AutoScalingGroupARN",
        "AutoScalingGroupName",
        "Service",
        "Event",
        "Time",
    }
    assert set(action) == {
        "Origin",
        "LifecycleHookName",
        "Destination",
        "AccountId",
        "RequestId",
        "LifecycleTransition",
        "AutoScalingGroupName",
        "Service",
        "Time",
        "EC2InstanceId",
        "LifecycleActionToken",
    }
    assert (action["Origin"], action["Destination"]) == ("EC2", "AutoScalingGroup")
    assert action["Service"] == "AWS Auto Scaling"
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", action["Time"])
    assert action["EC2InstanceId"] == group.in_state("Pending:Wait")[0]

    # And EventBridge gets the same action too, as on AWS (intake de-duplicates)
    assert [e["detail"]["LifecycleActionToken"] for e in aws.bus.events] == [action["LifecycleActionToken"]]

    # And DescribeLifecycleHooks shows the target
    (hook,) = aws.autoscaling.describe_lifecycle_hooks(AutoScalingGroupName="workers")["LifecycleHooks"]
    assert hook["NotificationTargetARN"] == arn


def test_an_sqs_hook_told_so_sends_lifecycle_bodies_without_origin_and_destination(aws: Emulation) -> None:
    # Given a queue, and Auto Scaling told to leave Origin and Destination out of queue notifications (as its message
    # example for SNS and SQS does)
    url = aws.sqs.create_queue(QueueName="intake-bare")["QueueUrl"]
    arn = aws.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    aws.control.configure(notifications_tell_origin=False)
    try:
        # When a launch hook that notifies it is put, and an instance launches
        group = aws.group(
            HookSpec("ready", LAUNCHING, 60, target_arn=arn, role_arn="arn:aws:iam::123456789012:role/r")
        )
        group.set_desired(1)
    finally:
        aws.control.configure(notifications_tell_origin=True)

    # Then the queue's lifecycle body has neither field, while the EventBridge event of the same action has both
    bodies = [
        json.loads(m["Body"])
        for m in aws.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    ]
    (action,) = [b for b in bodies if "LifecycleActionToken" in b]
    assert "Origin" not in action
    assert "Destination" not in action
    (event,) = [
        e for e in aws.bus.events if e["detail"]["LifecycleActionToken"] == action["LifecycleActionToken"]
    ]
    assert (event["detail"]["Origin"], event["detail"]["Destination"]) == ("EC2", "AutoScalingGroup")


def test_putting_a_hook_that_notifies_a_missing_queue_fails(aws: Emulation) -> None:
    # Given a group
    aws.group()

    # When a hook names a queue that does not exist
    with pytest.raises(ClientError) as raised:
        aws.autoscaling.put_lifecycle_hook(
            AutoScalingGroupName="workers",
            LifecycleHookName="ready",
            LifecycleTransition=LAUNCHING,
            NotificationTargetARN="arn:aws:sqs:eu-west-1:123456789012:nope",
            RoleARN="arn:aws:iam::123456789012:role/r",
        )

    # Then PutLifecycleHook fails as on AWS (its test notification cannot be sent)
    assert raised.value.response["Error"]["Code"] == "ValidationError"
