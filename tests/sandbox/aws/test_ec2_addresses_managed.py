"""An Elastic IP on a NAT gateway's network interface, as the sandbox answers for it: as EC2 does, where moto 5 does
not (see ``nodecycle_sandbox.aws.ec2_addresses_managed``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import ec2_addresses, ec2_addresses_managed, ec2_tags


@pytest.fixture
def ec2() -> Iterator[Any]:
    ec2_addresses.install()
    ec2_addresses_managed.install()
    ec2_tags.install()
    with mock_aws():
        yield boto3.client("ec2", region_name="eu-west-1")


def _on_a_nat_gateway(ec2: Any) -> tuple[str, str]:
    """A NAT gateway's address: its allocation id, and the gateway's network interface."""
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    gateway = ec2.create_nat_gateway(SubnetId=subnet, AllocationId=allocation)["NatGateway"]
    (address,) = gateway["NatGatewayAddresses"]
    return allocation, address["NetworkInterfaceId"]


def test_a_nat_gateway_s_interface_is_requester_managed_and_in_use(ec2: Any) -> None:
    # Given a NAT gateway
    _, interface = _on_a_nat_gateway(ec2)

    # When its network interface is described, Then it shows as EC2 shows it (moto: an available interface of
    # the account's, as if an instance had left it behind)
    (described,) = ec2.describe_network_interfaces(NetworkInterfaceIds=[interface])["NetworkInterfaces"]
    assert (described["RequesterManaged"], described["InterfaceType"], described["Status"]) == (
        True,
        "nat_gateway",
        "in-use",
    )


def test_an_address_on_a_nat_gateway_is_not_disassociated_by_disassociate_address(ec2: Any) -> None:
    # Given a NAT gateway's address
    allocation, interface = _on_a_nat_gateway(ec2)
    (address,) = ec2.describe_addresses(AllocationIds=[allocation])["Addresses"]

    # When DisassociateAddress names its association, Then EC2's refusal comes (moto disassociated it) and the
    # address stays with the gateway
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.disassociate_address(AssociationId=address["AssociationId"])
    assert refused.value.response["Error"]["Code"] == "AuthFailure"
    (after,) = ec2.describe_addresses(AllocationIds=[allocation])["Addresses"]
    assert after.get("NetworkInterfaceId") == interface
    assert after.get("AssociationId") == address["AssociationId"]


def test_an_address_on_an_interface_of_the_account_s_own_is_still_disassociated(ec2: Any) -> None:
    # Given an address on a network interface created by the account (attached to nothing)
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    interface = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    association = ec2.associate_address(AllocationId=allocation, NetworkInterfaceId=interface)[
        "AssociationId"
    ]

    # When it is disassociated, Then it is free
    ec2.disassociate_address(AssociationId=association)
    (after,) = ec2.describe_addresses(AllocationIds=[allocation])["Addresses"]
    assert after.get("AssociationId") is None
