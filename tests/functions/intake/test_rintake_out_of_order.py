"""One instance's lifecycle actions told out of order, against the sandbox's Auto Scaling (moto with the lifecycle
emulation, which holds and refuses actions as Auto Scaling does): an instance terminated while its launch action was
held (the launch's event late, after the terminate's), and an instance's two launch actions through its warm pool
under one hook (the first's event late). Each held before these tests: kept for what the suite did not cover."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import boto3
import pytest

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from tests.functions.intake.conftest import GROUP
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.functions.intake.test_intake_function import work
from tests.support.events import happening_now, load_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack


@pytest.mark.parametrize("launch_late", [True, False], ids=["launch told after", "launch told first"])
def test_an_instance_terminated_while_its_launch_was_held_has_its_terminate_lifecycle_going(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    launch_late: bool,
) -> None:
    # Given an instance launching (held by the launch hook), terminated before its launch action was completed:
    # Auto Scaling ends the launch action and holds the instance under the terminate hook
    autoscaling = boto3.client("autoscaling")
    autoscaling.set_desired_capacity(AutoScalingGroupName=GROUP, DesiredCapacity=1)
    (launch,) = [a for a in sandbox.control.actions() if a.transition == LAUNCHING and a.active]
    autoscaling.terminate_instance_in_auto_scaling_group(
        InstanceId=launch.instance_id, ShouldDecrementDesiredCapacity=True
    )
    terminate = sandbox.action(launch.instance_id, TERMINATING)
    told = [sandbox.bus.of(launch.token), sandbox.bus.of(terminate.token)]

    # When intake takes in both actions' events, the launch's after the terminate's (or before it), each twice
    for event in (told[::-1] if launch_late else told) * 2:
        assert sandbox.intake.handler(event, LambdaContext()) is None

    # Then the terminate action has its lifecycle and its first step, one each, whatever the launch's event did
    terminating = [r for r in records() if r["transition"] == "autoscaling:EC2_INSTANCE_TERMINATING"]
    assert [r["token"] for r in terminating] == [terminate.token]
    assert [m["step"] for m in work(stack.drain_queue) if m["record_id"] == terminating[0]["id"]] == [
        "acquire-slot"
    ]


@pytest.mark.parametrize("later_first", [True, False], ids=["out of the pool first", "into the pool first"])
def test_an_instances_two_launch_actions_through_its_warm_pool_in_either_order_leave_the_later_one_going(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    later_first: bool,
) -> None:
    # Given an instance's two launch actions under one hook: into its warm pool, then, ten minutes on and the
    # first one over, out of it into service, each with its own token, told in either order (the first's late)
    into = happening_now(load_event("eventbridge-launch-into-warm-pool.json"))
    into["time"] = (
        datetime.fromisoformat(into["time"].replace("Z", "+00:00")) - timedelta(minutes=10)
    ).strftime("%Y-%m-%dT%H:%M:%SZ")
    out = happening_now(load_event("eventbridge-launch-from-warm-pool.json"))
    out["detail"]["LifecycleActionToken"] = str(uuid.uuid4())

    # When intake takes each in
    for event in [out, into] if later_first else [into, out]:
        assert sandbox.intake.handler(event, LambdaContext()) is None

    # Then the action out of the pool has its lifecycle and its first step (the readiness gate), whatever came
    # first; the one into the pool told after it starts nothing
    steps = {m["record_id"]: m["step"] for m in work(stack.drain_queue)}
    going = [r["id"] for r in records() if r["token"] == out["detail"]["LifecycleActionToken"]]
    assert [steps.get(record) for record in going] == ["ready-gate"]
    if later_first:
        assert [r["token"] for r in records()] == [out["detail"]["LifecycleActionToken"]]
