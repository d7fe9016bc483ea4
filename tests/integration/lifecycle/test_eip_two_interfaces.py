"""An instance with two network interfaces, end to end on the sandbox: EC2 refuses it by its id, nodecycle puts
the pool's address on its primary interface, sees it on the instance, and gives it back at terminate."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle.domain.model import ADDRESSES_LEFT, Transition
from nodecycle_sandbox.aws.group import wait_for
from tests.integration.lifecycle.harness import OWNER, POOL, find_record, pool_address, running, waits_in_line

pytestmark = pytest.mark.slow


def test_a_pool_address_goes_to_the_primary_interface_of_an_instance_with_two_and_back_at_terminate() -> None:
    # Given a launch waiting for an address of an empty pool, whose instance the VPC CNI gives a second interface
    parameters = {"EipMode": "pool", "EipPoolName": POOL, "EipWaitSeconds": "300"}
    with running(parameters=parameters, size=0, workloads=None) as sandbox:
        ec2: Any = sandbox.client("ec2")
        sandbox.asg.set_desired(1)
        instance = wait_for(lambda: next(iter(sandbox.asg.instances()), None), 30, "a launch")
        wait_for(lambda: waits_in_line(sandbox, instance), 60, "the launch to find the pool empty")
        (described,) = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"]
        (primary,) = [n["NetworkInterfaceId"] for n in described["NetworkInterfaces"]]
        second = ec2.create_network_interface(SubnetId=described["SubnetId"])["NetworkInterface"]
        ec2.attach_network_interface(
            NetworkInterfaceId=second["NetworkInterfaceId"], InstanceId=instance, DeviceIndex=1
        )

        # When an address comes into the pool
        pooled = pool_address(sandbox)

        # Then the launch takes it on the primary interface, sees it on the instance, and goes in service
        sandbox.asg.wait_in_service(1, timeout=90)
        (address,) = ec2.describe_addresses(AllocationIds=[pooled])["Addresses"]
        assert (address.get("InstanceId"), address.get("NetworkInterfaceId")) == (instance, primary)

        # When the instance terminates, Then its address is found on it and given back to the pool, not leaked
        sandbox.asg.terminate(instance, decrement=True)

        def given_back() -> bool:
            (found,) = ec2.describe_addresses(AllocationIds=[pooled])["Addresses"]
            return "AssociationId" not in found

        wait_for(given_back, 120, "the address given back")
        record = wait_for(
            lambda: (
                (r := find_record(sandbox, instance, Transition.TERMINATING)) is not None
                and r.completed_at is not None
                and r
            ),
            120,
            "the terminate completed",
        )
        assert ADDRESSES_LEFT not in record.extra
        owned = ec2.describe_addresses(Filters=[{"Name": "tag:nodecycle:owner", "Values": [OWNER]}])
        assert [a["AllocationId"] for a in owned["Addresses"]] == [pooled]
