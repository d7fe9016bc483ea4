"""The sweeper's Elastic IP part on moto, after each crash a launch or a terminate can leave behind: what it
frees, what it returns to its pool, and what it never touches (another owner's, an operator's, a stopped
instance's)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3

from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG, POOL_TAG
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from nodecycle_sandbox.aws import ec2_addresses_managed
from nodecycle_sandbox.aws.install import install
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, ec2, run_instances
from tests.functions.eip.test_address_sweep_on_ec2 import shutting_down
from tests.support.stack import Stack
from tests.unit.sweeper.test_orphans import AMPLE

__all__ = ["ec2"]  # (the AWS-like EC2 client fixture)

OWNER = "stack-a"  # the settings' owner id (tests/conftest.py)


def stamp(ago: timedelta) -> str:
    return (datetime.now(UTC) - ago).isoformat(timespec="seconds")


def state() -> dict[str, str | None]:
    return {a["AllocationId"]: a.get("InstanceId") or None for a in addresses()}


def sweep() -> tuple[int, int]:
    report = address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)
    return report.released, report.returned


def test_each_crash_of_a_launch_or_a_terminate_leaves_nothing_past_the_grace(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given what crashes left, for this owner:
    launching, terminated, releasing = run_instances(3)
    # a launch that allocated a moment ago and crashed before associating (it associates on redelivery)
    young = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: launching, ALLOCATED_AT_TAG: stamp(timedelta())})
    # a launch that allocated an hour ago and crashed before associating, its instance gone since
    stale = allocate(
        **{OWNER_TAG: OWNER, INSTANCE_TAG: terminated, ALLOCATED_AT_TAG: stamp(timedelta(hours=1))}
    )
    # a terminate that disassociated and crashed before releasing
    between = allocate(
        **{OWNER_TAG: OWNER, INSTANCE_TAG: releasing, ALLOCATED_AT_TAG: stamp(timedelta(hours=1))}
    )
    # a terminate that crashed before disassociating a pool address (its instance is gone since)
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    ec2.moto.associate_address(AllocationId=pooled, InstanceId=releasing, AllowReassociation=False)
    boto3.client("ec2").terminate_instances(InstanceIds=[terminated])

    # When the sweeper runs
    released, returned = sweep()

    # Then the stale and the half-released addresses are gone and the young one waits for its launch
    assert state() == {young: None, pooled: releasing}
    assert (released, returned) == (2, 0)
    # And once the pool address's instance is gone, the next sweep returns it to its pool, never releases it
    shutting_down(releasing)  # (its termination begun: EC2 still shows the association until it is over)
    assert sweep() == (0, 1)
    assert state() == {young: None, pooled: None}
    assert stale not in state()
    assert between not in state()


def test_a_stopped_instance_keeps_its_address_and_an_operators_address_is_never_touched(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given a stopped instance holding the address nodecycle allocated for it an hour ago (a stop is the
    # release step's to judge: the instance may start again), an address of this owner tagged by hand and
    # unassociated, one tagged by hand on a gone instance's network interface, and another owner's leak
    stopped, gone = run_instances(2)
    kept = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: stopped, ALLOCATED_AT_TAG: stamp(timedelta(hours=1))})
    ec2.moto.associate_address(AllocationId=kept, InstanceId=stopped, AllowReassociation=False)
    boto3.client("ec2").stop_instances(InstanceIds=[stopped])
    by_hand = allocate(**{OWNER_TAG: OWNER})
    theirs = allocate(**{OWNER_TAG: "stack-b", ALLOCATED_AT_TAG: stamp(timedelta(hours=1))})
    client = boto3.client("ec2")
    subnet = client.describe_subnets()["Subnets"][0]["SubnetId"]
    interface = client.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    static = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: gone})
    ec2.moto.associate_address(AllocationId=static, NetworkInterfaceId=interface, AllowReassociation=False)
    client.terminate_instances(InstanceIds=[gone])

    # When the sweeper runs
    assert sweep() == (0, 0)

    # Then every one of them is as it was
    assert state() == {kept: stopped, by_hand: None, theirs: None, static: None}
    on_interface = {a["AllocationId"]: a.get("NetworkInterfaceId") for a in addresses()}
    assert on_interface[static] == interface


def test_an_address_left_on_the_interface_of_a_gone_instance_is_disassociated_and_released(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given nodecycle's address on a network interface that outlived its instance (DeleteOnTermination off)
    (gone,) = run_instances(1)
    client = boto3.client("ec2")
    subnet = client.describe_subnets()["Subnets"][0]["SubnetId"]
    interface = client.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    left = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: gone, ALLOCATED_AT_TAG: stamp(timedelta(hours=1))})
    ec2.moto.associate_address(AllocationId=left, NetworkInterfaceId=interface, AllowReassociation=False)
    client.terminate_instances(InstanceIds=[gone])

    # When the sweeper runs
    assert sweep() == (1, 0)

    # Then it is released
    assert state() == {}


def test_a_pool_address_its_terminate_returned_after_the_listing_is_not_counted_as_the_sweeps(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given a pool address on an instance whose termination has begun, which the terminate's own release step
    # returns to the pool once the sweep has listed it, and a launch claims at once
    gone, launching = run_instances(2)
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    association = ec2.moto.associate_address(AllocationId=pooled, InstanceId=gone, AllowReassociation=False)
    shutting_down(gone)
    others = boto3.client("ec2")  # the eip function's client, not the sweeper's
    listed: list[bool] = []

    def returned_and_claimed_once_listed(**_: Any) -> None:
        if not listed:
            listed.append(True)
            others.disassociate_address(AssociationId=association["AssociationId"])
            others.associate_address(AllocationId=pooled, InstanceId=launching, AllowReassociation=False)

    ec2.moto.meta.events.register("after-call.ec2.DescribeAddresses", returned_and_claimed_once_listed)

    # When the sweeper runs
    released, returned = sweep()

    # Then the address stays with the launch (the sweep's disassociation named the old association only), and
    # the sweep counts no return it did not make (before: one, in SweptEips and EipsReturnedBySweep, and a
    # warning that it had disassociated the address from a gone instance)
    assert state() == {pooled: launching}
    assert (released, returned) == (0, 0)


def test_an_address_on_a_nat_gateway_is_left_to_it_and_fails_no_sweep(stack: Stack, ec2: AwsLikeEc2) -> None:
    # Given a pool address, allocated into its pool for an instance gone since (the pool's tag names only the
    # instance that grew the pool), that an operator gave to a NAT gateway: on the gateway's interface, which no
    # instance holds and which is the gateway's, not an instance's left behind (requester-managed)
    ec2_addresses_managed.install()  # (EC2's answers for a NAT gateway's interface and address)
    (grower,) = run_instances(1)
    client = boto3.client("ec2")
    days_ago = stamp(timedelta(days=2))
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci", INSTANCE_TAG: grower, ALLOCATED_AT_TAG: days_ago})
    subnet = client.describe_subnets()["Subnets"][0]["SubnetId"]
    gateway = client.create_nat_gateway(SubnetId=subnet, AllocationId=pooled)["NatGateway"]
    interface = gateway["NatGatewayAddresses"][0]["NetworkInterfaceId"]
    client.terminate_instances(InstanceIds=[grower])

    # When the sweeper runs, Then it does not fail (before: EC2 refused the disassociation, AuthFailure, at every
    # sweep, and every sweep failed) and the address stays with the gateway
    assert sweep() == (0, 0)
    on_interface = {a["AllocationId"]: a.get("NetworkInterfaceId") for a in addresses()}
    assert on_interface == {pooled: interface}


def test_a_pool_address_left_on_the_interface_of_its_claimer_is_returned_though_its_grower_lives(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given a pool address allocated for an instance that still runs (it grew the pool), claimed since by another
    # instance that went without its release step, leaving the address on its interface, which outlived it
    grower, claimer = run_instances(2)
    client = boto3.client("ec2")
    days_ago = stamp(timedelta(days=2))
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci", INSTANCE_TAG: grower, ALLOCATED_AT_TAG: days_ago})
    subnet = client.describe_subnets()["Subnets"][0]["SubnetId"]
    interface = client.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    ec2.moto.associate_address(AllocationId=pooled, NetworkInterfaceId=interface, AllowReassociation=False)
    client.terminate_instances(InstanceIds=[claimer])

    # When the sweeper runs, Then the address is back in its pool (before: kept on the leftover interface for as
    # long as the instance that grew the pool lived, lost to the pool)
    assert sweep() == (0, 1)
    assert state() == {pooled: None}


def test_addresses_left_on_the_second_interface_of_a_terminated_instance_are_freed(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given an instance gone without its release step, whose second interface (not deleted on termination) holds
    # an address allocated for it and, on another private IP, a pool address grown for an instance that lives
    install()  # (EC2's termination: the interface that outlives its instance detached)
    grower, gone = run_instances(2)
    client = boto3.client("ec2")
    (described,) = client.describe_instances(InstanceIds=[gone])["Reservations"][0]["Instances"]
    second = client.create_network_interface(
        SubnetId=described["SubnetId"], SecondaryPrivateIpAddressCount=1
    )["NetworkInterface"]
    interface = second["NetworkInterfaceId"]
    attached = client.attach_network_interface(NetworkInterfaceId=interface, InstanceId=gone, DeviceIndex=1)
    client.modify_network_interface_attribute(
        NetworkInterfaceId=interface,
        Attachment={"AttachmentId": attached["AttachmentId"], "DeleteOnTermination": False},
    )
    days_ago = stamp(timedelta(days=2))
    allocated = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: gone, ALLOCATED_AT_TAG: days_ago})
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci", INSTANCE_TAG: grower, ALLOCATED_AT_TAG: days_ago})
    primary_ip, other_ip = [ip["PrivateIpAddress"] for ip in second["PrivateIpAddresses"]]
    for allocation, ip in ((allocated, primary_ip), (pooled, other_ip)):
        ec2.moto.associate_address(
            AllocationId=allocation,
            NetworkInterfaceId=interface,
            PrivateIpAddress=ip,
            AllowReassociation=False,
        )
    client.terminate_instances(InstanceIds=[gone])

    # When the sweeper runs, and again (EC2 refuses a release until its disassociation has settled)
    first = sweep()
    second_sweep = sweep()

    # Then the address allocated for the gone instance is released, and the pool's is back in its pool
    assert state() == {pooled: None}
    assert (first[0] + second_sweep[0], first[1] + second_sweep[1]) == (1, 1)
