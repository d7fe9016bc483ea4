"""A pool launch whose instance shows Auto Scaling's tags a few seconds after its launch, end to end on the sandbox
with the EIP function's role as the template writes it: the role is granted AssociateAddress on instances by those
tags alone, so EC2 refuses the association until they are there (UnauthorizedOperation). That refusal is the
instance's: the launch takes the pool's free address once the tags are there, and the pool, growing when empty, does
not grow past an address nothing was wrong with."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle_sandbox.aws.group import wait_for
from tests.integration.lifecycle.harness import OWNER, POOL, pool_address, running

pytestmark = pytest.mark.slow


def test_a_pool_launch_whose_instance_is_tagged_late_takes_the_free_address_and_grows_no_pool() -> None:
    # Given a pool of one free address, growing when empty, and instances that show Auto Scaling's tags 3 s after
    # their launch
    parameters = {
        "EipMode": "pool",
        "EipPoolName": POOL,
        "EipPoolAllocateWhenEmpty": "true",
        "EipWaitSeconds": "300",
    }
    with running(parameters=parameters, size=0, workloads=None) as sandbox:
        ec2: Any = sandbox.client("ec2")
        free = pool_address(sandbox)
        sandbox.aws.configure(instance_tags_after_seconds=3.0)

        # When an instance launches
        sandbox.asg.set_desired(1)
        instance = wait_for(lambda: next(iter(sandbox.asg.instances()), None), 30, "a launch")

        # Then it goes in service holding the pool's free address, and the pool holds no other
        sandbox.asg.wait_in_service(1, timeout=120)
        pooled = ec2.describe_addresses(
            Filters=[
                {"Name": "tag:nodecycle:owner", "Values": [OWNER]},
                {"Name": "tag:nodecycle:pool", "Values": [POOL]},
            ]
        )["Addresses"]
        assert {a["AllocationId"]: a.get("InstanceId") for a in pooled} == {free: instance}
