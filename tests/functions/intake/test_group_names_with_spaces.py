"""Intake against the sandbox's Auto Scaling: a group's name is read as Auto Scaling writes it. Auto Scaling lets a
group's name begin or end with spaces (its API model: ``ResourceName``, any XML character, spaces included, 1 to
1,600 of them), so ``"nodes-general "`` is another group than ``"nodes-general"``, of another stack or of none."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING, AwsControl, install
from tests.functions.intake.conftest import GROUP, LAUNCH_HOOK, make_group
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack

OTHER = GROUP + " "  # another group, whose name ends with a space


class _Bus:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def publish(self, event: dict[str, Any]) -> None:
        self.events.append(event)


@pytest.fixture
def sandbox(stack: Stack) -> Iterator[tuple[AwsControl, _Bus, ModuleType]]:
    install()
    control = AwsControl(region="eu-west-1", account=DEFAULT_ACCOUNT_ID)
    bus = _Bus()
    control.connect(events=bus, nodes=None)
    make_group(GROUP)
    make_group(OTHER)
    yield control, bus, load_function("intake")
    control.close()


def _records() -> list[dict[str, Any]]:
    items = boto3.resource("dynamodb").Table("nodecycle-lifecycle").scan()["Items"]
    return [item for item in items if "step" in item]


def test_an_action_of_a_group_whose_name_ends_with_a_space_is_not_the_managed_groups(
    sandbox: tuple[AwsControl, _Bus, ModuleType],
) -> None:
    control, bus, intake = sandbox
    # Given an instance in service in the group whose name is the managed group's followed by a space
    autoscaling = boto3.client("autoscaling")
    autoscaling.set_desired_capacity(AutoScalingGroupName=OTHER, DesiredCapacity=1)
    (launched,) = [a for a in control.actions() if a.transition == LAUNCHING]
    autoscaling.complete_lifecycle_action(
        AutoScalingGroupName=OTHER,
        LifecycleHookName=LAUNCH_HOOK,
        LifecycleActionToken=launched.token,
        LifecycleActionResult="CONTINUE",
    )
    # When its terminate action's event comes, naming that group as Auto Scaling wrote it
    autoscaling.terminate_instance_in_auto_scaling_group(
        InstanceId=launched.instance_id, ShouldDecrementDesiredCapacity=True
    )
    (terminating,) = [a for a in control.actions() if a.transition == TERMINATING and a.active]
    (event,) = [e for e in bus.events if e["detail"]["LifecycleActionToken"] == terminating.token]
    assert event["detail"]["AutoScalingGroupName"] == OTHER

    # Then it is not the managed group's: nothing written, nothing to drain
    intake.handler(event, LambdaContext())
    assert _records() == []
