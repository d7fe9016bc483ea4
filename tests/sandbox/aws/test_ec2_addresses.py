"""moto's EC2 addresses as the sandbox patches them: an instance holds one Elastic IP, as in EC2."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle_sandbox.aws import ec2_addresses, ec2_tags
from nodecycle_sandbox.aws.group import SANDBOX_AMI


@pytest.fixture
def ec2() -> Iterator[Any]:
    ec2_addresses.install()
    ec2_tags.install()
    with mock_aws():
        yield boto3.client("ec2", region_name="eu-west-1")


def _instance(ec2: Any) -> str:
    image = SANDBOX_AMI
    instance: str = ec2.run_instances(ImageId=image, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    return instance


def _holders(ec2: Any) -> dict[str, str | None]:
    return {a["AllocationId"]: a.get("InstanceId") or None for a in ec2.describe_addresses()["Addresses"]}


def test_a_second_address_associated_with_an_instance_displaces_the_first(ec2: Any) -> None:
    # Given an instance that holds an Elastic IP
    instance = _instance(ec2)
    first = ec2.allocate_address(Domain="vpc")["AllocationId"]
    second = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(AllocationId=first, InstanceId=instance, AllowReassociation=False)

    # When another address is associated with it
    ec2.associate_address(AllocationId=second, InstanceId=instance, AllowReassociation=False)

    # Then the instance holds the new one only; the first stays allocated, associated with nothing
    assert _holders(ec2) == {first: None, second: instance}
    released = next(a for a in ec2.describe_addresses()["Addresses"] if a["AllocationId"] == first)
    assert "AssociationId" not in released


def test_an_address_held_by_one_instance_is_still_refused_to_another(ec2: Any) -> None:
    # Given an address associated with one instance
    one, other = _instance(ec2), _instance(ec2)
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(AllocationId=address, InstanceId=one, AllowReassociation=False)

    # When it is associated with another without reassociation, Then EC2's refusal comes, nothing moves
    with pytest.raises(ec2.exceptions.ClientError, match=r"Resource\.AlreadyAssociated"):
        ec2.associate_address(AllocationId=address, InstanceId=other, AllowReassociation=False)
    assert _holders(ec2) == {address: one}


def test_an_address_on_a_network_interface_without_an_instance_is_refused_to_an_instance(ec2: Any) -> None:
    # Given an address associated with a network interface attached to no instance (one that outlived its
    # instance, a NAT box's, another tool's)
    instance = _instance(ec2)
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    interface = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(AllocationId=address, NetworkInterfaceId=interface, AllowReassociation=False)

    # When it is associated with an instance without reassociation, Then EC2's refusal comes, nothing moves
    with pytest.raises(ec2.exceptions.ClientError, match=r"Resource\.AlreadyAssociated"):
        ec2.associate_address(AllocationId=address, InstanceId=instance, AllowReassociation=False)
    (found,) = ec2.describe_addresses(AllocationIds=[address])["Addresses"]
    assert (found["NetworkInterfaceId"], found.get("InstanceId") or None) == (interface, None)

    # And with reassociation allowed, it moves
    ec2.associate_address(AllocationId=address, InstanceId=instance, AllowReassociation=True)
    assert _holders(ec2) == {address: instance}


def test_an_address_being_released_is_never_described_without_its_allocation_id(
    ec2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an allocated address, and a DescribeAddresses that lands at the moment the release removes it
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    backend = ec2_backends[ACCOUNT_ID]["eu-west-1"]
    seen: list[list[str | None]] = []

    class Watched(list[Any]):
        def remove(self, item: Any) -> None:
            seen.append([a.allocation_id for a in backend.describe_addresses()])
            super().remove(item)

    monkeypatch.setattr(backend, "addresses", Watched(backend.addresses))

    # When it is released
    ec2.release_address(AllocationId=address)

    # Then that describe saw it whole (moto alone showed it without an id), and it is gone after
    assert seen == [[address]]
    assert ec2.describe_addresses()["Addresses"] == []


def test_an_associated_address_is_not_released_until_it_is_disassociated(ec2: Any) -> None:
    # Given an address associated with an instance
    instance = _instance(ec2)
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    association = ec2.associate_address(AllocationId=address, InstanceId=instance)["AssociationId"]

    # When it is released, Then EC2's refusal comes (moto alone disassociated it silently) and it stays held
    with pytest.raises(ec2.exceptions.ClientError, match=r"InvalidIPAddress\.InUse"):
        ec2.release_address(AllocationId=address)
    assert _holders(ec2) == {address: instance}

    # and once disassociated, it is released
    ec2.disassociate_address(AssociationId=association)
    ec2.release_address(AllocationId=address)
    assert ec2.describe_addresses()["Addresses"] == []


def test_in_a_default_vpc_an_associated_address_is_disassociated_and_released_without_a_word(
    ec2: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the emulation set to answer as EC2 does for addresses of a default VPC, and an address in use
    monkeypatch.setattr(ec2_addresses, "DEFAULT_VPC", True)
    instance = _instance(ec2)
    allocated = ec2.allocate_address(Domain="vpc")
    ec2.associate_address(AllocationId=allocated["AllocationId"], InstanceId=instance)

    # When it is released, Then no refusal comes: the instance loses it and it is gone
    ec2.release_address(AllocationId=allocated["AllocationId"])
    assert ec2.describe_addresses()["Addresses"] == []
    (reservation,) = ec2.describe_instances(InstanceIds=[instance])["Reservations"]
    assert reservation["Instances"][0].get("PublicIpAddress") != allocated["PublicIp"]


def test_tags_are_found_by_their_resource_and_a_released_addresss_are_forgotten(ec2: Any) -> None:
    # Given two tagged addresses, an instance with tags of its own, and a third address released
    def tagged(**tags: str) -> str:
        specification = [
            {"ResourceType": "elastic-ip", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ]
        allocation: str = ec2.allocate_address(Domain="vpc", TagSpecifications=specification)["AllocationId"]
        return allocation

    mine, theirs, gone = tagged(owner="a", pool="p"), tagged(owner="b"), tagged(owner="a")
    instance = _instance(ec2)
    ec2.create_tags(Resources=[instance], Tags=[{"Key": "owner", "Value": "a"}])
    ec2.release_address(AllocationId=gone)

    # When addresses are described by tag, Then each answer has its own tags, as EC2 gives them
    found = ec2.describe_addresses(Filters=[{"Name": "tag:owner", "Values": ["a"]}])["Addresses"]
    assert [(a["AllocationId"], a["Tags"]) for a in found] == [
        (mine, [{"Key": "owner", "Value": "a"}, {"Key": "pool", "Value": "p"}])
    ]
    assert [a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]] == [mine, theirs]
    # and the released address's tags are gone with it
    described = ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [gone]}])["Tags"]
    assert described == []
    backend = ec2_backends[ACCOUNT_ID]["eu-west-1"]
    assert gone not in backend.tags


def test_allocations_beyond_the_address_quota_are_refused_until_one_is_released(ec2: Any) -> None:
    # Given an account whose Elastic IP quota is 2 (5 by default on AWS: "Elastic IP address quota", EC2
    # user guide), both allocated
    ec2_addresses.set_quota(ec2_backends[ACCOUNT_ID]["eu-west-1"], 2)
    first = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.allocate_address(Domain="vpc")

    # When a third is allocated, Then EC2's refusal comes (moto allocated without end) and nothing is added
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.allocate_address(Domain="vpc")
    assert refused.value.response["Error"] == {
        "Code": "AddressLimitExceeded",
        "Message": "The maximum number of addresses has been reached.",
    }
    assert len(ec2.describe_addresses()["Addresses"]) == 2

    # and once one is released, the next allocation succeeds
    ec2.release_address(AllocationId=first)
    ec2.allocate_address(Domain="vpc")


def test_an_address_is_not_associated_with_a_terminated_instance(ec2: Any) -> None:
    # Given a terminated instance and a free address
    instance = _instance(ec2)
    ec2.terminate_instances(InstanceIds=[instance])
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]

    # When the address is associated with it, Then EC2's refusal comes (moto associated it) and it stays free
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.associate_address(AllocationId=address, InstanceId=instance, AllowReassociation=False)
    assert refused.value.response["Error"] == {
        "Code": "InvalidInstanceID",
        "Message": f"The terminated instance '{instance}' is not in a valid state for this operation.",
    }
    assert _holders(ec2) == {address: None}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (
            "aws:owner",
            "a",
            "Value ( aws:owner ) for parameter key is invalid. Tag keys starting with 'aws:' are reserved for "
            "internal use",
        ),
        (
            "AWS:owner",
            "a",
            "Value ( AWS:owner ) for parameter key is invalid. Tag keys starting with 'aws:' are reserved for "
            "internal use",
        ),
        ("k" * 129, "a", "Tag key exceeds the maximum length of 128 characters"),
        ("owner", "v" * 257, "Tag value exceeds the maximum length of 256 characters"),
    ],
)
def test_tags_ec2_restricts_are_refused_at_allocation_and_by_create_tags(
    ec2: Any, key: str, value: str, message: str
) -> None:
    # Given a tag that EC2's tag restrictions forbid ("Tag restrictions", EC2 user guide: keys up to 128
    # characters, values up to 256, no key beginning with aws:), which moto stored
    tags = [{"Key": key, "Value": value}]

    # When an address is allocated with it, Then EC2's refusal comes and nothing is allocated
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.allocate_address(Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}])
    assert refused.value.response["Error"] == {"Code": "InvalidParameterValue", "Message": message}
    assert ec2.describe_addresses()["Addresses"] == []

    # and CreateTags of it on an address is refused the same way, the address keeping its tags
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.create_tags(Resources=[address], Tags=tags)
    assert refused.value.response["Error"] == {"Code": "InvalidParameterValue", "Message": message}
    assert ec2.describe_addresses()["Addresses"][0].get("Tags", []) == []


def test_tags_at_ec2s_limits_are_taken(ec2: Any) -> None:
    # Given a key of 128 characters and a value of 256, the longest EC2 takes
    tags = [{"Key": "k" * 128, "Value": "v" * 256}]

    # When an address is allocated with it, Then it carries it
    ec2.allocate_address(Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}])
    assert ec2.describe_addresses()["Addresses"][0]["Tags"] == tags


def test_a_terminated_instance_s_address_is_disassociated_and_stays_allocated(ec2: Any) -> None:
    # Given an instance that holds an Elastic IP
    instance = _instance(ec2)
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(AllocationId=address, InstanceId=instance, AllowReassociation=False)

    # When the instance is terminated
    ec2.terminate_instances(InstanceIds=[instance])

    # Then the address is free, still allocated (moto kept it on the terminated instance), and can be released
    (found,) = ec2.describe_addresses(AllocationIds=[address])["Addresses"]
    assert {key: found.get(key) or None for key in ("InstanceId", "AssociationId", "NetworkInterfaceId")} == {
        "InstanceId": None,
        "AssociationId": None,
        "NetworkInterfaceId": None,
    }
    ec2.release_address(AllocationId=address)
    assert ec2.describe_addresses()["Addresses"] == []


def _secondary_ip(ec2: Any, interface: str) -> str:
    """A secondary private IP assigned to ``interface`` (the VPC CNI gives pods such IPs of a node's interfaces)."""
    ec2.assign_private_ip_addresses(NetworkInterfaceId=interface, SecondaryPrivateIpAddressCount=1)
    (described,) = ec2.describe_network_interfaces(NetworkInterfaceIds=[interface])["NetworkInterfaces"]
    (secondary,) = [ip["PrivateIpAddress"] for ip in described["PrivateIpAddresses"] if not ip["Primary"]]
    return str(secondary)


def test_an_address_on_a_secondary_private_ip_stays_there_when_the_instance_takes_another(ec2: Any) -> None:
    # Given an instance whose primary interface has a secondary private IP holding an address (an operator's,
    # associated with that IP: AssociateAddress's PrivateIpAddress)
    launched = ec2.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)["Instances"][0]
    instance, primary_ip = launched["InstanceId"], launched["PrivateIpAddress"]
    interface = launched["NetworkInterfaces"][0]["NetworkInterfaceId"]
    secondary = _secondary_ip(ec2, interface)
    theirs = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(
        AllocationId=theirs,
        NetworkInterfaceId=interface,
        PrivateIpAddress=secondary,
        AllowReassociation=False,
    )

    # Then DescribeAddresses shows it on that IP of the instance (moto said the primary one)
    (found,) = ec2.describe_addresses(AllocationIds=[theirs])["Addresses"]
    assert (found.get("InstanceId"), found["PrivateIpAddress"]) == (instance, secondary)

    # When another address is associated with the instance (its primary private IP)
    mine = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(AllocationId=mine, InstanceId=instance, AllowReassociation=False)

    # Then the instance holds both, each on its own private IP: EC2 displaces only the address of the private IP
    # the new one goes to (moto's emulation took the instance's address off it, as if it had one IP)
    shown = {a["AllocationId"]: a.get("PrivateIpAddress") for a in ec2.describe_addresses()["Addresses"]}
    assert shown == {theirs: secondary, mine: primary_ip}
    assert _holders(ec2) == {theirs: instance, mine: instance}

    # And a third one on the secondary IP displaces the operator's there, and leaves the primary IP's
    third = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(
        AllocationId=third, NetworkInterfaceId=interface, PrivateIpAddress=secondary, AllowReassociation=False
    )
    assert _holders(ec2) == {theirs: None, mine: instance, third: instance}


def test_an_address_is_refused_to_an_instance_of_a_vpc_without_an_internet_gateway(ec2: Any) -> None:
    # Given an instance, and a bare network interface, in a VPC without an internet gateway
    vpc = ec2.create_vpc(CidrBlock="10.7.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.7.1.0/24")["Subnet"]["SubnetId"]
    launched = ec2.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1, SubnetId=subnet)
    instance = launched["Instances"][0]["InstanceId"]
    interface = ec2.create_network_interface(SubnetId=subnet)["NetworkInterface"]["NetworkInterfaceId"]
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]

    # When the address is associated with either, Then EC2 refuses it for the VPC's sake, nothing moves
    for target in ({"InstanceId": instance}, {"NetworkInterfaceId": interface}):
        with pytest.raises(ec2.exceptions.ClientError, match=r"Gateway\.NotAttached") as refused:
            ec2.associate_address(AllocationId=address, AllowReassociation=False, **target)
        assert vpc in refused.value.response["Error"]["Message"]
    assert _holders(ec2) == {address: None}

    # And once an internet gateway is attached to the VPC, the instance takes it
    gateway = ec2.create_internet_gateway()["InternetGateway"]["InternetGatewayId"]
    ec2.attach_internet_gateway(InternetGatewayId=gateway, VpcId=vpc)
    ec2.associate_address(AllocationId=address, InstanceId=instance, AllowReassociation=False)
    assert _holders(ec2) == {address: instance}


def test_an_ended_association_is_not_found_and_the_newer_one_stays(ec2: Any) -> None:
    # Given an address whose association with one instance ended, and which another instance holds since
    one, other = _instance(ec2), _instance(ec2)
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    first = ec2.associate_address(AllocationId=address, InstanceId=one, AllowReassociation=False)
    ended = first["AssociationId"]
    ec2.disassociate_address(AssociationId=ended)
    ec2.associate_address(AllocationId=address, InstanceId=other, AllowReassociation=False)

    # When the ended association is disassociated (a sweep's or a release's stale listing), Then EC2 answers that it
    # does not exist (as Terraform's aws_eip_association meets it), and the newer association stays
    with pytest.raises(ec2.exceptions.ClientError, match=r"InvalidAssociationID\.NotFound"):
        ec2.disassociate_address(AssociationId=ended)
    assert _holders(ec2) == {address: other}
