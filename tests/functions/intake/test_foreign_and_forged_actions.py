"""Intake against the sandbox's Auto Scaling (moto with the lifecycle emulation): messages that name a real
instance of a managed group but no action Auto Scaling issued (forged by someone allowed to send to the intake
queue, or replayed) must not keep the true action's event from being taken in."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING, AwsControl, install
from nodecycle_sandbox.aws.lifecycle import ActionRecord
from tests.functions.intake.conftest import GROUP, LAUNCH_HOOK, make_group
from tests.support.events import load_event, sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack, receive_all


@dataclass
class Bus:
    """The default event bus: what the emulation sends to EventBridge."""

    events: list[dict[str, Any]] = field(default_factory=list)

    def publish(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def of(self, token: str) -> dict[str, Any]:
        return next(e for e in self.events if e["detail"]["LifecycleActionToken"] == token)


@dataclass
class Sandbox:
    control: AwsControl
    bus: Bus
    intake: ModuleType

    def action(self, instance: str, transition: str) -> ActionRecord:
        (found,) = [
            a
            for a in self.control.actions()
            if a.instance_id == instance and a.transition == transition and a.active
        ]
        return found


@pytest.fixture
def sandbox(stack: Stack) -> Iterator[Sandbox]:
    install()
    control = AwsControl(region="eu-west-1", account=DEFAULT_ACCOUNT_ID)
    bus = Bus()
    control.connect(events=bus, nodes=None)
    make_group(GROUP)
    yield Sandbox(control=control, bus=bus, intake=load_function("intake"))
    control.close()


def in_service(sandbox: Sandbox) -> str:
    """One instance of the managed group, its launch action completed."""
    autoscaling = boto3.client("autoscaling")
    autoscaling.set_desired_capacity(AutoScalingGroupName=GROUP, DesiredCapacity=1)
    (launched,) = [a for a in sandbox.control.actions() if a.transition == LAUNCHING]
    autoscaling.complete_lifecycle_action(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=LAUNCH_HOOK,
        LifecycleActionToken=launched.token,
        LifecycleActionResult="CONTINUE",
    )
    return launched.instance_id


def records() -> list[dict[str, Any]]:
    items = boto3.resource("dynamodb").Table("nodecycle-lifecycle").scan()["Items"]
    return [item for item in items if "step" in item]


def hook_notification(instance: str, token: str, at: datetime) -> dict[str, Any]:
    body = json.loads(load_event("sqs-hook-terminate.json")["Records"][0]["body"])
    return {
        **body,
        "EC2InstanceId": instance,
        "LifecycleActionToken": token,
        "Time": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    }


def test_a_forged_notification_taken_in_first_does_not_make_the_true_action_a_duplicate(
    sandbox: Sandbox, stack: Stack
) -> None:
    # Given an instance of a managed group that its terminate hook holds (an action Auto Scaling issued)
    instance = in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(instance, TERMINATING)
    # and a hook notification sent to the intake queue by someone allowed to send to it, naming that instance,
    # its group and hook, with a token no hook issued and a time a little after the action's start
    forged = hook_notification(instance, str(uuid.uuid4()), datetime.now(UTC) + timedelta(seconds=5))
    assert sandbox.intake.handler(sqs_event(forged), LambdaContext()) == {"batchItemFailures": []}

    # When the action's own event arrives after it, by EventBridge
    sandbox.intake.handler(sandbox.bus.of(action.token), LambdaContext())

    # Then the true action has its lifecycle and its first unit of work, whatever the forged one claimed
    assert action.token in {record["token"] for record in records()}
    firsts = [json.loads(m["Body"])["record_id"] for m in receive_all(stack.drain_queue)]
    assert any(action.token in record_id for record_id in firsts)


def test_a_forged_notification_dated_before_the_true_action_changes_nothing(
    sandbox: Sandbox, stack: Stack
) -> None:
    # Given an instance of a managed group that its terminate hook holds, whose action's event was taken in
    instance = in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(instance, TERMINATING)
    sandbox.intake.handler(sandbox.bus.of(action.token), LambdaContext())
    (true,) = records()

    # When a hook notification sent to the intake queue names that instance, with a token no hook issued and a
    # time before the action's start (as a replay of an earlier action of the instance would)
    forged = hook_notification(instance, str(uuid.uuid4()), datetime.now(UTC) - timedelta(minutes=1))
    assert sandbox.intake.handler(sqs_event(forged), LambdaContext()) == {"batchItemFailures": []}

    # Then nothing is written for it (Auto Scaling does not hold its token), and the true action goes on
    assert records() == [true]
    assert action.active
