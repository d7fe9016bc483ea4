"""One lifecycle action told twice, by EventBridge and by the intake queue (a hook notification, or its event's
on-failure record redriven), minutes apart, the second after its lifecycle completed the action: against the
sandbox's Auto Scaling (moto with the lifecycle emulation), the second starts nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from nodecycle.adapters.clock import SystemClock
from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.conftest import GROUP, TERMINATE_HOOK
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    in_service,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.functions.intake.test_redriven_dead_letters import on_failure
from tests.support.emf import metric
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all

Delivery = Callable[[dict[str, Any]], dict[str, Any]]


def by_eventbridge(event: dict[str, Any]) -> dict[str, Any]:
    return event


def by_hook_notification(event: dict[str, Any]) -> dict[str, Any]:
    """The same action as the hook's notification target sends it to the intake queue."""
    at = datetime.fromisoformat(event["time"])
    return sqs_event(
        hook_notification(event["detail"]["EC2InstanceId"], event["detail"]["LifecycleActionToken"], at)
    )


def redriven(event: dict[str, Any]) -> dict[str, Any]:
    """The action's event dead-lettered by Lambda (its on-failure record), sent back to the intake queue."""
    return sqs_event(on_failure(event))


def finished(record: dict[str, Any]) -> None:
    """The lifecycle over, as its last step leaves it once the action is completed."""
    boto3.resource("dynamodb").Table("nodecycle-lifecycle").update_item(
        Key={"id": record["id"]},
        UpdateExpression="SET #s = :done, finished_at = :now, completed_at = :now REMOVE open_owner, due_epoch",
        ExpressionAttributeNames={"#s": "step"},
        ExpressionAttributeValues={":done": "done", ":now": datetime.now(UTC).isoformat()},
    )


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (by_eventbridge, by_hook_notification),
        (by_hook_notification, by_eventbridge),
        (by_hook_notification, redriven),
        (by_eventbridge, redriven),
    ],
    ids=lambda delivery: delivery.__name__,
)
def test_the_second_telling_of_an_action_completed_since_starts_nothing(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    first: Delivery,
    second: Delivery,
) -> None:
    # Given an instance of a managed group whose terminate action was taken in by one path, its lifecycle
    # completed the action (Auto Scaling holds it no more) and finished
    instance = in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(instance, TERMINATING)
    event = sandbox.bus.of(action.token)
    assert not (sandbox.intake.handler(first(event), LambdaContext()) or {}).get("batchItemFailures")
    (record,) = records()
    (first_step,) = [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)]
    boto3.client("autoscaling").complete_lifecycle_action(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=TERMINATE_HOOK,
        LifecycleActionToken=action.token,
        LifecycleActionResult="CONTINUE",
    )
    finished(record)
    (done,) = records()
    capsys.readouterr()

    # When the same action comes by the other path minutes later
    later = datetime.now(UTC) + timedelta(minutes=4)
    monkeypatch.setattr(SystemClock, "now", lambda self: later)
    response = sandbox.intake.handler(second(event), LambdaContext())

    # Then it is a duplicate: no record written over, no work sent, no failure to retry
    assert not (response or {}).get("batchItemFailures")
    assert records() == [done]
    assert [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)] == [first_step]
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") == 1
