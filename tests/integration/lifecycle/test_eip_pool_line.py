"""First come, first served for an empty Elastic IP pool, on the sandbox: an address given back goes to the
launch that has waited for it, not to a launch that comes after (which would look at once and take it)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import LAUNCHING
from tests.integration.lifecycle.harness import (
    OWNER,
    POOL,
    a_launch_waiting_for_an_empty_pool,
    running,
    waits_in_line,
)

pytestmark = pytest.mark.slow


def holder(ec2: Any, allocation_id: str) -> str | None:
    (address,) = ec2.describe_addresses(AllocationIds=[allocation_id])["Addresses"]
    return address.get("InstanceId") or ("free" if not address.get("AssociationId") else "an interface")


def test_an_address_given_back_goes_to_the_launch_waiting_for_it_not_to_one_launched_after() -> None:
    # Given a pool of one address, on the group's one instance, and a second launch waiting for an address
    parameters = {"EipMode": "pool", "EipPoolName": POOL, "EipWaitSeconds": "300"}
    with running(parameters=parameters, size=0, workloads=None) as sandbox:
        ec2 = sandbox.client("ec2")
        pooled, old, waiting = a_launch_waiting_for_an_empty_pool(sandbox)
        assert holder(ec2, pooled) == old

        # When the old instance terminates (its address given back once drained), and a new launch comes the
        # moment the address is free
        sandbox.asg.terminate(old, decrement=True)
        wait_for(lambda: holder(ec2, pooled) != old, 120, "the old instance's address given back")
        # (the waiting launch, first in line, may have taken it already: it looks every 15 s)
        sandbox.asg.set_desired(2)
        late = wait_for(
            lambda: next(iter(set(sandbox.asg.instances()) - {old, waiting}), None), 30, "the next launch"
        )
        taker = wait_for(lambda: (h := holder(ec2, pooled)) not in ("free", old) and h, 90, "a taker")
        time.sleep(1)  # (not an assertion's timing: lets a wrong second association show, if any)

        # Then the launch that waited holds the address, and goes in service; the later one waits its turn
        assert taker == waiting, f"the address went to {taker}, launched after {waiting}"
        assert holder(ec2, pooled) == waiting
        sandbox.asg.wait_in_service(1, timeout=60)
        assert waiting in sandbox.asg.in_state("InService")
        assert all(a.active for a in sandbox.asg.actions(transition=LAUNCHING) if a.instance_id == late)
        wait_for(lambda: waits_in_line(sandbox, late), 30, "the later launch to wait")


def test_an_address_the_quota_frees_goes_to_the_launch_waiting_for_it_not_to_one_launched_after() -> None:
    # Given allocate mode, the group's one instance holding the only address the account's quota allows, and a
    # second launch waiting for the quota
    parameters = {"EipMode": "allocate", "EipWaitSeconds": "300"}
    with running(parameters=parameters, size=0, workloads=None) as sandbox:
        ec2 = sandbox.client("ec2")

        def holders() -> set[str]:
            found = ec2.describe_addresses(Filters=[{"Name": "tag:nodecycle:owner", "Values": [OWNER]}])
            return {a.get("InstanceId") or "free" for a in found["Addresses"]}

        _, old, waiting = a_launch_waiting_for_an_empty_pool(sandbox, quota=True)
        assert holders() == {old}

        # When the old instance terminates (its address released once drained), and a new launch is asked for
        # the moment the quota has room
        sandbox.asg.terminate(old, decrement=True)
        wait_for(lambda: old not in holders(), 120, "the old instance's address released")
        sandbox.asg.set_desired(2)
        late = wait_for(
            lambda: next(iter(set(sandbox.asg.instances()) - {old, waiting}), None), 30, "the next launch"
        )
        taker = wait_for(lambda: next(iter(holders() - {"free"}), None), 90, "a taker")
        time.sleep(1)  # (not an assertion's timing: lets a wrong second allocation show, if any)

        # Then the launch that waited holds the address; the later one waits its turn
        assert taker == waiting, f"the address went to {taker}, launched after {waiting}"
        assert holders() == {waiting}
        wait_for(lambda: waits_in_line(sandbox, late), 30, "the later launch to wait")
