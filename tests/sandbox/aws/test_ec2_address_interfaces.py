"""Elastic IPs on network interfaces, as the sandbox answers for them: as EC2 does, where moto 5 does not.

The Address data type (EC2 API reference, DescribeAddresses): ``InstanceId`` is "the ID of the instance that the
address is associated with (if any)", whether it was associated by the instance or by one of its interfaces;
AssociateAddress takes an instance id only for an instance with "exactly one attached network interface" ("If
the instance has more than one network interface, you must specify a network interface ID").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID

from nodecycle_sandbox.aws import ec2_addresses, ec2_tags
from nodecycle_sandbox.aws.group import SANDBOX_AMI

OWNER = [{"Key": "owner", "Value": "a"}]


@pytest.fixture
def ec2() -> Iterator[Any]:
    ec2_addresses.install()
    ec2_tags.install()
    with mock_aws():
        yield boto3.client("ec2", region_name="eu-west-1")


def _two_interfaces(ec2: Any, *, secondary_deleted_on_termination: bool = True) -> tuple[str, str, str]:
    """An instance with a second network interface (the VPC CNI's): its id, its primary and second interfaces."""
    (launched,) = ec2.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)["Instances"]
    instance = launched["InstanceId"]
    (primary,) = [n["NetworkInterfaceId"] for n in launched["NetworkInterfaces"]]
    second = ec2.create_network_interface(SubnetId=launched["SubnetId"])["NetworkInterface"][
        "NetworkInterfaceId"
    ]
    attachment = ec2.attach_network_interface(NetworkInterfaceId=second, InstanceId=instance, DeviceIndex=1)
    ec2.modify_network_interface_attribute(
        NetworkInterfaceId=second,
        Attachment={
            "AttachmentId": attachment["AttachmentId"],
            "DeleteOnTermination": secondary_deleted_on_termination,
        },
    )
    return instance, primary, second


def _allocate(ec2: Any) -> str:
    spec = [{"ResourceType": "elastic-ip", "Tags": OWNER}]
    allocation: str = ec2.allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"]
    return allocation


def _described(ec2: Any, allocation: str) -> dict[str, Any]:
    (found,) = ec2.describe_addresses(AllocationIds=[allocation])["Addresses"]
    return dict(found)


def _private_ip(ec2: Any, interface: str) -> str:
    (described,) = ec2.describe_network_interfaces(NetworkInterfaceIds=[interface])["NetworkInterfaces"]
    return str(described["PrivateIpAddress"])


def _found(ec2: Any, **filters: str) -> list[str]:
    wanted = [{"Name": name.replace("_", "-"), "Values": [value]} for name, value in filters.items()]
    return [a["AllocationId"] for a in ec2.describe_addresses(Filters=wanted)["Addresses"]]


def test_an_instance_with_several_interfaces_is_refused_by_its_id(ec2: Any) -> None:
    # Given an instance with two network interfaces and a free address
    instance, _, _ = _two_interfaces(ec2)
    address = _allocate(ec2)

    # When the address is associated by the instance's id, Then EC2's refusal comes (moto put it on the first
    # interface) and the address stays free
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.associate_address(AllocationId=address, InstanceId=instance, AllowReassociation=False)
    assert refused.value.response["Error"] == {
        "Code": "InvalidInstanceID",
        "Message": f"There are multiple interfaces attached to instance '{instance}'. Please specify an "
        "interface ID for the operation instead.",
    }
    assert "AssociationId" not in _described(ec2, address)


def test_an_address_associated_by_an_interface_shows_the_instance_it_is_attached_to(ec2: Any) -> None:
    # Given an instance with two network interfaces
    instance, primary, _ = _two_interfaces(ec2)
    address = _allocate(ec2)

    # When an address is associated with its primary interface
    association = ec2.associate_address(
        AllocationId=address, NetworkInterfaceId=primary, AllowReassociation=False
    )["AssociationId"]

    # Then DescribeAddresses shows it as EC2 does: with the instance (moto left InstanceId empty), the interface,
    # its owner and the private IP
    found = _described(ec2, address)
    assert {key: found.get(key) for key in ("InstanceId", "NetworkInterfaceId", "AssociationId")} == {
        "InstanceId": instance,
        "NetworkInterfaceId": primary,
        "AssociationId": association,
    }
    assert (found["NetworkInterfaceOwnerId"], found["PrivateIpAddress"]) == (
        ACCOUNT_ID,
        _private_ip(ec2, primary),
    )


def test_an_address_on_an_interface_is_found_by_instance_by_interface_and_by_tag(ec2: Any) -> None:
    # Given an address on the primary interface of an instance with two, and another address free
    instance, primary, second = _two_interfaces(ec2)
    address, free = _allocate(ec2), _allocate(ec2)
    ec2.associate_address(AllocationId=address, NetworkInterfaceId=primary, AllowReassociation=False)

    # Then the filters nodecycle uses find it (moto's instance-id filter missed it), alone
    assert _found(ec2, instance_id=instance) == [address]
    assert _found(ec2, **{"tag:owner": "a", "instance-id": instance}) == [address]
    assert _found(ec2, network_interface_id=primary) == [address]
    assert _found(ec2, network_interface_id=second) == []
    assert sorted(_found(ec2, **{"tag:owner": "a"})) == sorted([address, free])


def test_an_address_associated_by_an_interface_is_disassociated_to_nothing(ec2: Any) -> None:
    # Given an address on the primary interface of an instance with two
    instance, primary, _ = _two_interfaces(ec2)
    allocated = ec2.allocate_address(Domain="vpc")
    address = allocated["AllocationId"]
    association = ec2.associate_address(
        AllocationId=address, NetworkInterfaceId=primary, AllowReassociation=False
    )["AssociationId"]

    # When the association ends
    ec2.disassociate_address(AssociationId=association)

    # Then the address is described as EC2 describes a free one: without an instance, interface or association
    # (moto sent empty InstanceId and NetworkInterfaceId), and the instance's filter no longer finds it
    found = _described(ec2, address)
    assert {"InstanceId", "NetworkInterfaceId", "AssociationId", "PrivateIpAddress"} & set(found) == set()
    assert _found(ec2, instance_id=instance) == []
    (described,) = ec2.describe_network_interfaces(NetworkInterfaceIds=[primary])["NetworkInterfaces"]
    assert described.get("Association", {}).get("PublicIp") != allocated["PublicIp"]


def test_an_address_on_an_interface_is_not_released_until_it_is_disassociated(ec2: Any) -> None:
    # Given an address on the primary interface of an instance with two
    instance, primary, _ = _two_interfaces(ec2)
    address = _allocate(ec2)
    association = ec2.associate_address(
        AllocationId=address, NetworkInterfaceId=primary, AllowReassociation=False
    )["AssociationId"]

    # When it is released, Then EC2's refusal comes (an address of a nondefault VPC) and it stays on the instance
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.release_address(AllocationId=address)
    assert refused.value.response["Error"]["Code"] == "InvalidIPAddress.InUse"
    assert _described(ec2, address)["InstanceId"] == instance

    # and once disassociated, it is released
    ec2.disassociate_address(AssociationId=association)
    ec2.release_address(AllocationId=address)
    assert ec2.describe_addresses()["Addresses"] == []


def test_a_stopped_instance_s_primary_interface_takes_an_address(ec2: Any) -> None:
    # Given a stopped instance with two interfaces (an address stays with a stopped instance, and one may be
    # associated with it)
    instance, primary, _ = _two_interfaces(ec2)
    ec2.stop_instances(InstanceIds=[instance])
    address = _allocate(ec2)

    # When an address is associated with its primary interface, Then it holds it
    ec2.associate_address(AllocationId=address, NetworkInterfaceId=primary, AllowReassociation=False)
    assert _found(ec2, instance_id=instance) == [address]


def test_a_terminated_instance_leaves_no_instance_on_the_address_of_an_interface_that_outlives_it(
    ec2: Any,
) -> None:
    # Given an instance with an address on its primary interface and another on a second interface that is not
    # deleted on termination
    instance, primary, second = _two_interfaces(ec2, secondary_deleted_on_termination=False)
    on_primary, on_second = _allocate(ec2), _allocate(ec2)
    ec2.associate_address(AllocationId=on_primary, NetworkInterfaceId=primary, AllowReassociation=False)
    ec2.associate_address(AllocationId=on_second, NetworkInterfaceId=second, AllowReassociation=False)
    assert sorted(_found(ec2, instance_id=instance)) == sorted([on_primary, on_second])

    # When the instance is terminated
    ec2.terminate_instances(InstanceIds=[instance])

    # Then the primary's address is free, the second's stays with its interface, and neither shows the instance
    assert "AssociationId" not in _described(ec2, on_primary)
    kept = _described(ec2, on_second)
    assert (kept["NetworkInterfaceId"], kept.get("InstanceId")) == (second, None)
    assert _found(ec2, instance_id=instance) == []


def test_an_interface_that_outlives_its_terminated_instance_is_detached_and_available(ec2: Any) -> None:
    # Given an instance with a second interface that is not deleted on termination
    instance, _, second = _two_interfaces(ec2, secondary_deleted_on_termination=False)

    # When the instance is terminated
    ec2.terminate_instances(InstanceIds=[instance])

    # Then the interface is detached, available to another instance (moto kept it in use, attached to the
    # terminated instance)
    (described,) = ec2.describe_network_interfaces(NetworkInterfaceIds=[second])["NetworkInterfaces"]
    assert described["Status"] == "available"
    assert "Attachment" not in described
