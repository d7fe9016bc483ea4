"""A crossed notification: a terminating instance named, on the intake queue, with the live token of another
terminating instance of its group, dated after its own action's start, against the sandbox's Auto Scaling told to
take a call's token alone (as AWS may: it does not say it refuses a token named with another instance). The
instance's own lifecycle was taken in first. A hook holds one action of an instance at a time, so a later start
under the same hook is a later action only once the earlier one is over; while Auto Scaling still holds the
earlier lifecycle's token, the later message is forged or crossed. Taken for a later action, it replaced the
instance's own lifecycle: it took the instance's slot ahead of it, cordoned its node, and, when the other
instance's action ended, its cleanup cleared the node's claim while the instance's own drain waited (seed 67
scenario 8, ``--forge --lag``: ownership)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3

from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.conftest import GROUP, LAUNCH_HOOK
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all


def two_in_service(box: Sandbox) -> tuple[str, str]:
    """Two instances of the managed group in service (their launches completed), in the order of their ids."""
    autoscaling = boto3.client("autoscaling")
    autoscaling.set_desired_capacity(AutoScalingGroupName=GROUP, DesiredCapacity=2)
    for launched in box.control.actions():
        autoscaling.complete_lifecycle_action(
            AutoScalingGroupName=GROUP,
            LifecycleHookName=LAUNCH_HOOK,
            LifecycleActionToken=launched.token,
            LifecycleActionResult="CONTINUE",
        )
    first, second = sorted(a.instance_id for a in box.control.actions())
    return first, second


def two_terminating(box: Sandbox) -> tuple[str, str]:
    """Two instances of the managed group in service, then both terminating (each held by the terminate hook)."""
    autoscaling = boto3.client("autoscaling")
    first, second = two_in_service(box)
    for instance in (first, second):
        autoscaling.terminate_instance_in_auto_scaling_group(
            InstanceId=instance, ShouldDecrementDesiredCapacity=True
        )
    return first, second


def test_a_terminating_instance_named_later_with_another_held_instances_token_is_not_taken_in(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
) -> None:
    # Given an Auto Scaling that takes a call's token alone, two instances both held by the terminate hook, and
    # the first one's own action taken in
    sandbox.control.configure(token_checked_against_instance=False)
    first, second = two_terminating(sandbox)
    own = sandbox.action(first, TERMINATING)
    other = sandbox.action(second, TERMINATING)
    sandbox.intake.handler(sandbox.bus.of(own.token), LambdaContext())

    # When a notification on the intake queue names the first instance with the second's live token, dated after
    crossed = hook_notification(first, other.token, datetime.now(UTC) + timedelta(seconds=1))
    assert sandbox.intake.handler(sqs_event(crossed), LambdaContext()) == {"batchItemFailures": []}

    # Then no lifecycle is written for it, no work is sent for it (the own lifecycle's first step alone), and the first instance's own lifecycle keeps its
    # action's claim
    assert {(r["instance_id"], r["token"]) for r in records()} == {(first, own.token)}
    sent = [json.loads(m["Body"])["record_id"] for m in receive_all(stack.drain_queue)]
    assert sent == [f"{first}/terminate/{own.token}"]
    claims = [
        item
        for item in boto3.resource("dynamodb").Table("nodecycle-lifecycle").scan()["Items"]
        if "step" not in item and first in str(item.get("lifecycle", ""))
    ]
    assert claims
    assert all(own.token in str(item["lifecycle"]) for item in claims)
