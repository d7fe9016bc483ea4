"""AWS Health's update of a scheduled change that names many instances: one event tells of the maintenance of
every affected instance of the account, each entity with its own status (PENDING until its part is done, RESOLVED
after), and Health sends it again, open, when one instance's part is over while others' wait. An instance whose
part is resolved has nothing left to drain for, and its update is AWS's own, no stale message to page for."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID

from nodecycle_sandbox.aws import LAUNCHING, AwsControl, install
from tests.functions.intake.conftest import GROUP, LAUNCH_HOOK, make_group
from tests.support.emf import metric_counts
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack


class _Bus:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def publish(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def health(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("source") == "aws.health"]


@pytest.fixture
def sandbox(stack: Stack) -> Iterator[tuple[AwsControl, _Bus, ModuleType]]:
    install()
    control = AwsControl(region="eu-west-1", account=DEFAULT_ACCOUNT_ID)
    bus = _Bus()
    control.connect(events=bus, nodes=None)
    make_group(GROUP)
    yield control, bus, load_function("intake")
    control.close()


def in_service(control: AwsControl, count: int) -> list[str]:
    autoscaling = boto3.client("autoscaling")
    autoscaling.set_desired_capacity(AutoScalingGroupName=GROUP, DesiredCapacity=count)
    launched = [a for a in control.actions() if a.transition == LAUNCHING]
    for action in launched:
        autoscaling.complete_lifecycle_action(
            AutoScalingGroupName=GROUP,
            LifecycleHookName=LAUNCH_HOOK,
            LifecycleActionToken=action.token,
            LifecycleActionResult="CONTINUE",
        )
    return sorted(a.instance_id for a in launched)


def records() -> list[dict[str, Any]]:
    items = boto3.resource("dynamodb").Table("nodecycle-lifecycle").scan()["Items"]
    return [item for item in items if "step" in item]


def rejections(output: str) -> dict[str, float]:
    return {
        dict(dimensions).get("reason", ""): count
        for (name, dimensions), count in metric_counts(output).items()
        if name == "LifecycleEventsRejected"
    }


def test_an_instance_resolved_in_an_open_maintenance_is_not_rejected_as_stale(
    sandbox: tuple[AwsControl, _Bus, ModuleType], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given one Health event for the reboot of two instances of a managed group, its window open since a minute,
    # taken in when it came
    control, bus, intake = sandbox
    first, second = in_service(control, 2)
    control.schedule_maintenance(instance_ids=[first, second], code="system-reboot", starts_in=-60)
    (told,) = bus.health()
    intake.handler(told, LambdaContext())
    assert len(records()) == 2
    capsys.readouterr()

    # When EC2 has rebooted the first, and Health sends its event again: open, the first RESOLVED
    control.end_maintenance(instance_ids=[first])
    update = bus.health()[-1]
    assert update["detail"]["statusCode"] == "open"
    intake.handler(update, LambdaContext())

    # Then nothing is rejected (AWS's own update, at every maintenance of more than one instance)
    assert rejections(capsys.readouterr().out) == {}


def test_an_instance_resolved_before_its_maintenance_starts_is_not_drained(
    sandbox: tuple[AwsControl, _Bus, ModuleType],
) -> None:
    # Given one Health event for the retirement of two instances of a managed group in three days, the first's
    # called off before intake took any of it in (the event's first delivery dead-lettered, the stack deployed
    # since)
    control, bus, intake = sandbox
    first, second = in_service(control, 2)
    control.schedule_maintenance(instance_ids=[first, second], starts_in=3 * 86400)
    control.end_maintenance(instance_ids=[first], canceled=True)

    # When Health's update comes: upcoming, the first RESOLVED, the second PENDING
    update = bus.health()[-1]
    assert update["detail"]["statusCode"] == "upcoming"
    intake.handler(update, LambdaContext())

    # Then only the second is drained for: the first has no maintenance ahead
    assert sorted(r["instance_id"] for r in records()) == [second]
