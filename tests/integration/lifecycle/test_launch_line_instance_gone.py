"""A launch waiting in its pool's line for an address, whose instance is terminated meanwhile (an operator, a
scale-in of a launch not yet in service), on the sandbox: it waits for nothing from then on."""

from __future__ import annotations

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox.aws.group import HookSpec, wait_for
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING
from tests.integration.lifecycle.harness import POOL, a_launch_waiting_for_an_empty_pool, find_record, running

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 30  # seconds: short hooks, so that an action lapsing shows within the test


def test_a_launch_waiting_for_a_pool_address_whose_instance_is_terminated_ends_as_gone_not_lapsed() -> None:
    # Given a pool of one address, on the group's one instance, and a second launch waiting in the pool's line
    parameters = {
        "EipMode": "pool",
        "EipPoolName": POOL,
        "EipWaitSeconds": "600",
        "HeartbeatMarginSeconds": "5",
    }
    hooks = (
        HookSpec("nodecycle-launch", LAUNCHING, HEARTBEAT_TIMEOUT, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, HEARTBEAT_TIMEOUT, "CONTINUE"),
    )
    with running(parameters=parameters, size=0, hooks=hooks, workloads=None) as sandbox:
        ec2 = sandbox.client("ec2")
        pooled, old, waiting = a_launch_waiting_for_an_empty_pool(sandbox)

        # When the waiting launch's instance is terminated (its launch action ends with it)
        sandbox.asg.terminate(waiting, decrement=True)
        wait_for(lambda: waiting not in sandbox.asg.instances(), 60, "the waiting instance terminated")
        launch = wait_for(
            lambda: (
                (r := find_record(sandbox, waiting, Transition.LAUNCHING)) is not None and r.finished and r
            ),
            4 * HEARTBEAT_TIMEOUT,
            "the waiting launch to end",
        )

        # Then the launch ends as one whose instance is gone: not as an action that lapsed (the expired-actions
        # alarm) nor as an address that could not be had (the EIP failures alarm)
        assert launch.outcome == "instance-gone", launch.outcome
        # And the pool's address stayed where it was, and the line waits for no one
        (address,) = ec2.describe_addresses(AllocationIds=[pooled])["Addresses"]
        assert address.get("InstanceId") == old
