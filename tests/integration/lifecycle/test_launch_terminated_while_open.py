"""A launch whose instance the group terminates while the launch is still open (in the readiness gate, or in
its pool's line for an address), on the sandbox, while another tool's terminate hook holds the instance in
Terminating:Wait: EC2 says running all that time, but Auto Scaling ended the launch action with the
termination. The launch ends as one whose instance is gone, not as an action that expired (the expired-actions
alarm pages for actions nodecycle let lapse), and takes no address given back meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from nodecycle.domain.model import Step, Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import HookSpec, wait_for
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING
from tests.integration.lifecycle.harness import POOL, find_record, pool_address, running, waits_in_line

pytestmark = pytest.mark.slow

# Another tool's terminate hook on the same group (nodecycle does not manage it): it holds every terminating
# instance in Terminating:Wait, running in EC2, for minutes
OTHER_TOOL = HookSpec("backup-agent-terminate", TERMINATING, 600, "CONTINUE")


def hooks(launch_heartbeat_timeout: int) -> tuple[HookSpec, ...]:
    return (
        HookSpec("nodecycle-launch", LAUNCHING, launch_heartbeat_timeout, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, 300, "CONTINUE"),
        OTHER_TOOL,
    )


def ec2_state(ec2: Any, instance: str) -> str:
    found = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]
    return str(found["State"]["Name"])


def holder(ec2: Any, allocation_id: str) -> str | None:
    (address,) = ec2.describe_addresses(AllocationIds=[allocation_id])["Addresses"]
    return address.get("InstanceId")


def a_launch_in_the_gate(sandbox: Any) -> str:
    """The instance of a launch the group starts, its node never joining, once its lifecycle waits in the readiness
    gate, its action confirmed."""
    sandbox.aws.plan_nodes(never_join=1)
    sandbox.asg.set_desired(1)
    launched: str = wait_for(lambda: next(iter(sandbox.asg.instances()), None), 30, "a launch")
    wait_for(
        lambda: (
            (r := find_record(sandbox, launched, Transition.LAUNCHING)) is not None
            and r.step is Step.READY_GATE
            and r.verified_at is not None
        ),
        60,
        "the launch in the readiness gate",
    )
    return launched


def test_a_launch_in_the_readiness_gate_whose_instance_is_terminated_ends_as_gone_not_expired() -> None:
    # Given a launch waiting in the readiness gate for a node that never joins, its hook's heartbeat timeout
    # short (the gate heartbeats its action every few seconds)
    parameters = {"HeartbeatMarginSeconds": "5", "ReadinessTimeoutSeconds": "600"}
    with running(parameters=parameters, size=0, hooks=hooks(30), workloads=None) as sandbox:
        launched = a_launch_in_the_gate(sandbox)

        # When the group terminates its instance (an operator, a scale-in before it was in service), which
        # another tool's hook holds in Terminating:Wait, running in EC2
        sandbox.asg.terminate(launched, decrement=True)
        launch = wait_for(
            lambda: (
                (r := find_record(sandbox, launched, Transition.LAUNCHING)) is not None and r.finished and r
            ),
            90,
            "the launch to end",
        )

        # Then the launch ends as one whose instance is gone, not as an action that lapsed (nothing nodecycle
        # did let it lapse), and the gate did not time out either
        assert ec2_state(sandbox.client("ec2"), launched) == "running"
        assert launch.outcome == "instance-gone", launch.outcome
        assert launch.completed_at is None


# The pool's tests share one sandbox (a sandbox's start and, run in this order, the holder's launch fewer: two
# CPU-seconds of the file's eighteen): a pool of one address, the launch hook's heartbeat timeout each test's own
# (put before its launch: an action takes its hook's timeout when it starts; 300 s under a 5 s margin leaves the
# doomed launch's next heartbeat minutes away, as the default margin did). Each starts from the same scene
# whatever ran before it: one instance in service holding the pool's address (see ``a_launch_in_line``); what an
# earlier test left in Terminating:Wait holds no address and has left the line.
POOL_PARAMETERS = {
    "EipMode": "pool",
    "EipPoolName": POOL,
    "EipWaitSeconds": "600",
    "HeartbeatMarginSeconds": "5",
}


class PoolScene(NamedTuple):
    sandbox: Sandbox
    pooled: str  # the pool's one address: its allocation id


@pytest.fixture(scope="module")
def pool() -> Iterator[PoolScene]:
    with running(parameters=POOL_PARAMETERS, size=0, hooks=hooks(30), workloads=None) as sandbox:
        yield PoolScene(sandbox, pool_address(sandbox))


def a_launch_in_line(scene: PoolScene, launch_heartbeat_timeout: int) -> tuple[str, str]:
    """The instance in service holding the pool's one address (the one an earlier test left, or one launched
    now), and a second launch waiting in the pool's line, under a launch hook of ``launch_heartbeat_timeout``."""
    sandbox, ec2 = scene.sandbox, scene.sandbox.client("ec2")
    sandbox.asg.put_hook(hooks(launch_heartbeat_timeout)[0])
    sandbox.asg.set_desired(1)
    (old,) = sandbox.asg.wait_in_service(1, timeout=90)
    wait_for(lambda: holder(ec2, scene.pooled) == old, 30, "the pool's address on the instance in service")
    before = set(sandbox.asg.instances())
    sandbox.asg.set_desired(2)
    waiting: str = wait_for(lambda: next(iter(set(sandbox.asg.instances()) - before), None), 30, "a launch")
    wait_for(lambda: waits_in_line(sandbox, waiting), 60, "the launch to find no address to be had")
    return old, waiting


def test_a_launch_in_the_pools_line_whose_instance_is_terminated_ends_as_gone_not_expired(
    pool: PoolScene,
) -> None:
    # Given a pool of one address on the group's one instance, and a second launch waiting in the pool's
    # line, its hook's heartbeat timeout short
    sandbox, pooled = pool
    old, waiting = a_launch_in_line(pool, 30)

    # When the group terminates the waiting launch's instance, which another tool's hook holds in
    # Terminating:Wait, running in EC2
    sandbox.asg.terminate(waiting, decrement=True)
    launch = wait_for(
        lambda: (r := find_record(sandbox, waiting, Transition.LAUNCHING)) is not None and r.finished and r,
        90,
        "the waiting launch to end",
    )

    # Then it ends as one whose instance is gone, not as an action that lapsed
    ec2 = sandbox.client("ec2")
    assert ec2_state(ec2, waiting) == "running"
    assert launch.outcome == "instance-gone", launch.outcome
    assert holder(ec2, pooled) == old


def test_a_doomed_launch_first_in_the_pools_line_takes_no_address_given_back(pool: PoolScene) -> None:
    # Given a pool of one address on the group's one instance, and a second launch waiting in the pool's
    # line (its hook's heartbeat timeout the default's scale: no heartbeat of it due for minutes)
    sandbox, pooled = pool
    ec2 = sandbox.client("ec2")
    old, doomed = a_launch_in_line(pool, 300)
    # And the group terminates its instance (its launch action ends with it), held in Terminating:Wait by
    # another tool's hook, running in EC2
    sandbox.asg.terminate(doomed, decrement=True)
    wait_for(
        lambda: sandbox.asg.instances().get(doomed) == "Terminating:Wait", 30, "the instance terminating"
    )

    # When the old instance terminates and its address is given back to the pool, while the doomed launch
    # is still first in line
    sandbox.asg.terminate(old, decrement=True)

    def settled() -> bool:
        launch = find_record(sandbox, doomed, Transition.LAUNCHING)
        return holder(ec2, pooled) == doomed or (launch is not None and launch.finished)

    wait_for(settled, 120, "the doomed launch to take the address or end")

    # Then the doomed launch did not take the address (it would hold it until EC2 terminates the instance,
    # from whichever live launch waits next), and ended as one whose instance is gone
    assert holder(ec2, pooled) != doomed
    launch = wait_for(
        lambda: (r := find_record(sandbox, doomed, Transition.LAUNCHING)) is not None and r.finished and r,
        30,
        "the doomed launch to end",
    )
    assert launch.outcome == "instance-gone", launch.outcome
    assert ec2_state(ec2, doomed) == "running"
