"""A launch abandoned by EipFailurePolicy leaks no address, on the sandbox: what it allocated before EC2 refused
the association is released once its instance is gone, without waiting for the sweeper's grace."""

from __future__ import annotations

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.faults import Fault
from tests.integration.lifecycle.harness import find_record, running

pytestmark = pytest.mark.slow

OWNER = "nodecycle"  # the stack's name: the sandbox's owner id


def test_an_address_allocated_by_a_launch_abandoned_for_a_refused_association_is_released() -> None:
    # Given allocate mode, abandon on failure, and EC2 refusing the eip function's AssociateAddress (a service
    # control policy), the sweeper's grace far off
    parameters = {"EipMode": "allocate", "EipFailurePolicy": "abandon"}
    with running(parameters=parameters, size=0, workloads=None) as sandbox:
        ec2 = sandbox.client("ec2")

        def allocated_for(instance: str) -> list[str]:
            filters = [
                {"Name": "tag:nodecycle:owner", "Values": [OWNER]},
                {"Name": "tag:nodecycle:instance-id", "Values": [instance]},
            ]
            return [a["AllocationId"] for a in ec2.describe_addresses(Filters=filters)["Addresses"]]

        callers = [sandbox.runner.access_key("EipFunction")]
        sandbox.aws.arm_faults(
            faults=[Fault("scp", "aws-denied", target="ec2.AssociateAddress")], seed=1, callers=callers
        )
        try:
            # When an instance launches: its address is allocated, its association refused until the policy
            # abandons the launch (the group terminates the instance)
            sandbox.asg.set_desired(1)
            first = wait_for(lambda: next(iter(sandbox.asg.instances()), None), 30, "a launch")
            record = wait_for(
                lambda: (
                    (r := find_record(sandbox, first, Transition.LAUNCHING)) is not None and r.finished and r
                ),
                240,
                "the launch abandoned",
            )
            assert record.result == "ABANDON", record.outcome
            assert str(record.outcome).startswith("eip-failed: EC2 refused"), record.outcome
            # (the address it allocated before the refusal: a refused association is not retried on a new one)
            allocated = allocated_for(first)
        finally:
            sandbox.aws.disarm_faults()

        # Then the one address allocated for it is released once its instance is gone (the lifecycle of EC2's
        # state change): nothing is left for the sweeper
        assert len(allocated) == 1
        wait_for(lambda: allocated_for(first) == [], 60, "the abandoned launch's address released")
