"""An instance refresh of a group whose Elastic IP pool holds exactly one address per instance: each
replacement launches while the instance it replaces drains, and takes that one's address once it is back."""

from __future__ import annotations

import pytest

from nodecycle_sandbox.aws.records import LAUNCHING
from tests.integration.lifecycle.harness import POOL, pool_address, running

pytestmark = pytest.mark.slow


def test_a_refresh_with_a_pool_sized_to_the_fleet_hands_each_address_to_a_replacement() -> None:
    # Given two instances holding the only two addresses of their pool
    parameters = {"EipMode": "pool", "EipPoolName": POOL}
    with running(parameters=parameters, size=0) as sandbox:
        ec2 = sandbox.client("ec2")
        pool = {pool_address(sandbox) for _ in range(2)}
        sandbox.asg.set_desired(2)
        old = set(sandbox.asg.wait_in_service(2, timeout=120))

        # When the group is refreshed, both at once (each replacement launches while its old instance drains)
        refresh = sandbox.asg.start_refresh(min_healthy_percentage=0)
        sandbox.asg.wait_refresh(refresh, timeout=240)

        # Then no launch was abandoned for want of an address, and the pool's addresses are on the new instances
        new = set(sandbox.asg.in_state("InService"))
        launches = [a for a in sandbox.asg.actions(transition=LAUNCHING) if a.instance_id not in old]
        assert {a.instance_id for a in launches} == new
        assert [a.result for a in launches] == ["CONTINUE", "CONTINUE"]
        held = {
            a["AllocationId"]: a.get("InstanceId")
            for a in ec2.describe_addresses(AllocationIds=sorted(pool))["Addresses"]
        }
        assert set(held.values()) == new
