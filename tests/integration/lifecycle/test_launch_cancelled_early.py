"""A launch whose instance Auto Scaling terminates before the launch's first step runs (a scale-in right after
the scale-out, a Spot instance reclaimed at once), on the sandbox: the first step's confirmation finds no active
action for its token, as it would for a forged or foreign pair, and the launch used to end as
``unknown-action``, counted towards the alarm meant for those. Where the instance is tells them apart: one the
group lists on its way out, or one EC2 shows terminated with the group's tag, is a launch ended with its
instance (``instance-gone``, no page); an instance the group never had is still an unknown action."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import HookSpec, wait_for
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING
from tests.integration.lifecycle.harness import find_record, records, running

pytestmark = pytest.mark.slow

LAUNCH_HOOK = HookSpec("nodecycle-launch", LAUNCHING, 300, "ABANDON")
# Another tool's terminate hook (nodecycle does not manage it): it holds a terminating instance in
# Terminating:Wait, running in EC2, listed by its group
OTHER_TOOL = HookSpec("backup-agent-terminate", TERMINATING, 600, "CONTINUE")
PARAMETERS = {"EipMode": "allocate"}
IMAGE = "ami-12c6146b"  # one of moto's stock images


def ec2_state(sandbox: Sandbox, instance: str) -> str | None:
    found = sandbox.client("ec2").describe_instances(Filters=[{"Name": "instance-id", "Values": [instance]}])
    states = [i["State"]["Name"] for r in found["Reservations"] for i in r["Instances"]]
    return states[0] if states else None


def finished_launch(sandbox: Sandbox, instance: str) -> Any:
    return wait_for(
        lambda: (r := find_record(sandbox, instance, Transition.LAUNCHING)) is not None and r.finished and r,
        90,
        "the launch to end",
    )


def launched_and_stalled(sandbox: Sandbox) -> str:
    """A launch whose record intake wrote, its first step (ASSIGN_EIP) not run yet: the eip queue stalled."""
    sandbox.runner.set_sources_enabled("EipFunction", False)
    sandbox.asg.set_desired(1)
    launched = wait_for(lambda: next(iter(sandbox.asg.instances()), None), 30, "a launch")
    record = wait_for(lambda: find_record(sandbox, launched, Transition.LAUNCHING), 30, "the launch's record")
    assert record.verified_at is None  # (nothing has confirmed its action yet)
    return str(launched)


@pytest.mark.parametrize(
    ("hooks", "where"),
    [
        # held in Terminating:Wait by another tool's hook, running in EC2: its group lists it on its way out
        pytest.param((LAUNCH_HOOK, OTHER_TOOL), "Terminating:Wait", id="terminating-in-its-group"),
        # no terminate hook: terminated at once, no group lists it; EC2 still describes it, with its group's tag
        pytest.param((LAUNCH_HOOK,), None, id="terminated-and-out-of-its-group"),
    ],
)
def test_a_launch_whose_instance_is_terminated_before_its_first_step_ends_as_gone_not_unknown(
    hooks: tuple[HookSpec, ...], where: str | None
) -> None:
    # Given a launch whose first step has not run yet (its queue stalled)
    with running(parameters=PARAMETERS, size=0, hooks=hooks, workloads=None) as sandbox:
        launched = launched_and_stalled(sandbox)

        # When the group terminates its instance at once (a scale-in right after the scale-out), which ends its
        # launch action; and then the step runs
        sandbox.asg.terminate(launched, decrement=True)
        wait_for(lambda: sandbox.asg.instances().get(launched) == where, 60, f"the instance {where}")
        if where is None:
            wait_for(lambda: ec2_state(sandbox, launched) == "terminated", 60, "the instance terminated")
        sandbox.runner.set_sources_enabled("EipFunction", True)
        launch = finished_launch(sandbox, launched)

        # Then the launch ends as one whose instance is gone, not as an action Auto Scaling never had (the
        # unknown-actions alarm), nothing completed, no address left behind
        assert launch.outcome == "instance-gone", launch.outcome
        assert launch.completed_at is None
        ec2 = sandbox.client("ec2")
        assert ec2.describe_addresses()["Addresses"] == []


def test_a_launch_of_an_instance_its_group_never_had_is_still_an_unknown_action() -> None:
    # Given an instance run outside the group, terminated since (EC2 still describes it, without the group's tag),
    # and a well-formed launch notification on the intake queue that names it with a token Auto Scaling never
    # issued, for the group
    with running(parameters=PARAMETERS, size=0, hooks=(LAUNCH_HOOK,), workloads=None) as sandbox:
        ec2 = sandbox.client("ec2")
        (outsider,) = [
            i["InstanceId"] for i in ec2.run_instances(ImageId=IMAGE, MinCount=1, MaxCount=1)["Instances"]
        ]
        ec2.terminate_instances(InstanceIds=[outsider])
        token = str(uuid.uuid4())
        body = {
            "Origin": "EC2",
            "Destination": "AutoScalingGroup",
            "LifecycleHookName": LAUNCH_HOOK.name,
            "AccountId": "123456789012",
            "RequestId": str(uuid.uuid4()),
            "LifecycleTransition": LAUNCHING,
            "AutoScalingGroupName": sandbox.asg.name,
            "Service": "AWS Auto Scaling",
            "Time": datetime.now(UTC).isoformat(),
            "EC2InstanceId": outsider,
            "LifecycleActionToken": token,
        }
        queue = sandbox.runner.queue("IntakeQueue").url
        sandbox.client("sqs").send_message(QueueUrl=queue, MessageBody=json.dumps(body))

        # When its first step runs
        record_id = f"{outsider}/{Transition.LAUNCHING.short}/{token}"
        launch = wait_for(
            lambda: (r := records(sandbox).get(record_id)) is not None and r.finished and r, 60, record_id
        )

        # Then it is an unknown action (the alarm): no group ever had the instance
        assert launch.outcome == "unknown-action", launch.outcome
        assert launch.completed_at is None
