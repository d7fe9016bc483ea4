"""The sandbox's EC2 lag (nodecycle_sandbox.aws.ec2_consistency) against what EC2 does to a caller behind its writes:
a tag written on an address (or removed) shows late in a tag filter; an address another caller disassociated, or
that an instance's termination set free, is refused to ReleaseAddress as in use until the disassociation settles;
an association made by another is refused to AssociateAddress, never moved, though the lagging reads show it free;
and an address AWS locked (ec2_addresses.lock) is refused to ReleaseAddress (``InvalidAddress.Locked``, "cannot be
released from your account", the EC2 error codes reference), and associated as any other: EC2 documents no such
refusal of AssociateAddress (an address refused for its own sake is a denial by a condition on its tags:
``UnauthorizedOperation``)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle_sandbox.aws import ec2_addresses
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import IMAGE, Clock

LAGGING = "AKIAFUNCTIONEIPLAG09"
OPERATOR = "AKIATESTOPERATOR0000"
REGION = "eu-west-1"
WINDOW = 6.0


def client(key: str) -> Any:
    return boto3.client("ec2", region_name=REGION, aws_access_key_id=key, aws_secret_access_key="testing")


def tagged(key: str, name: str, value: str) -> list[str]:
    answer = client(key).describe_addresses(Filters=[{"Name": f"tag:{name}", "Values": [value]}])
    return [address["AllocationId"] for address in answer["Addresses"]]


def instance(key: str) -> str:
    launched = client(key).run_instances(ImageId=IMAGE, MinCount=1, MaxCount=1, InstanceType="t4g.small")
    return str(launched["Instances"][0]["InstanceId"])


@pytest.mark.parametrize("write", ["create", "delete"])
def test_a_tag_written_on_an_address_shows_in_a_tag_filter_only_once_the_window_is_over(
    clock: Clock, write: str
) -> None:
    # Given an address tagged before the lag, and a tag written on it (or removed) within the window
    allocation = client(OPERATOR).allocate_address(Domain="vpc")["AllocationId"]
    tag = [{"Key": "nodecycle:pool", "Value": "ci"}]
    if write == "delete":
        client(OPERATOR).create_tags(Resources=[allocation], Tags=tag)
    LAG.arm(WINDOW, [LAGGING], clock)
    if write == "create":
        client(OPERATOR).create_tags(Resources=[allocation], Tags=tag)
    else:
        client(OPERATOR).delete_tags(Resources=[allocation], Tags=tag)

    # Then the lagging caller's tag filter judges the address as it was, the writer's as it is
    before = [allocation] if write == "delete" else []
    assert tagged(LAGGING, "nodecycle:pool", "ci") == before
    assert tagged(OPERATOR, "nodecycle:pool", "ci") == ([allocation] if write == "create" else [])
    clock.now += WINDOW + 1
    assert tagged(LAGGING, "nodecycle:pool", "ci") == ([allocation] if write == "create" else [])


@pytest.mark.parametrize("how", ["disassociated by another", "its instance terminated"])
def test_a_release_of_an_address_freed_within_the_window_is_refused_as_in_use(clock: Clock, how: str) -> None:
    # Given an address on an instance, set free within the window by another caller or by the termination
    running = instance(OPERATOR)
    allocation = client(OPERATOR).allocate_address(Domain="vpc")["AllocationId"]
    association = client(OPERATOR).associate_address(AllocationId=allocation, InstanceId=running)[
        "AssociationId"
    ]
    LAG.arm(WINDOW, [LAGGING], clock)
    if how == "disassociated by another":
        client(OPERATOR).disassociate_address(AssociationId=association)
    else:
        client(OPERATOR).terminate_instances(InstanceIds=[running])

    # Then the lagging caller's read still shows it associated, and its release is refused as in use
    (seen,) = client(LAGGING).describe_addresses(AllocationIds=[allocation])["Addresses"]
    assert seen.get("AssociationId") == association
    with pytest.raises(ClientError) as refused:
        client(LAGGING).release_address(AllocationId=allocation)
    assert refused.value.response["Error"]["Code"] == "InvalidIPAddress.InUse"
    # and once the window is over, it is seen free and released
    clock.now += WINDOW + 1
    (seen,) = client(LAGGING).describe_addresses(AllocationIds=[allocation])["Addresses"]
    assert "AssociationId" not in seen
    client(LAGGING).release_address(AllocationId=allocation)


def test_an_address_associated_by_another_within_the_window_is_refused_not_moved(clock: Clock) -> None:
    # Given an address another caller associated within the window, which the lagging caller's reads show free
    first, second = instance(OPERATOR), instance(OPERATOR)
    allocation = client(OPERATOR).allocate_address(Domain="vpc")["AllocationId"]
    LAG.arm(WINDOW, [LAGGING], clock)
    client(OPERATOR).associate_address(AllocationId=allocation, InstanceId=first)
    (seen,) = client(LAGGING).describe_addresses(AllocationIds=[allocation])["Addresses"]
    assert "AssociationId" not in seen

    # When the lagging caller associates it with another instance, never moving it
    with pytest.raises(ClientError) as refused:
        client(LAGGING).associate_address(
            AllocationId=allocation, InstanceId=second, AllowReassociation=False
        )

    # Then EC2 refuses (its own state decides) and the address stays where it is
    assert refused.value.response["Error"]["Code"] == "Resource.AlreadyAssociated"
    (now,) = client(OPERATOR).describe_addresses(AllocationIds=[allocation])["Addresses"]
    assert now["InstanceId"] == first


def test_a_locked_address_is_refused_to_release_and_associated_as_any_other(clock: Clock) -> None:
    # Given an address AWS locked
    running = instance(OPERATOR)
    allocation = client(OPERATOR).allocate_address(Domain="vpc")["AllocationId"]
    ec2_addresses.lock(ec2_backends[DEFAULT_ACCOUNT_ID][REGION], allocation)

    # Then ReleaseAddress refuses it, whoever asks, and it stays allocated
    for key in (LAGGING, OPERATOR):
        with pytest.raises(ClientError) as refused:
            client(key).release_address(AllocationId=allocation)
        assert refused.value.response["Error"]["Code"] == "InvalidAddress.Locked"
    (seen,) = client(OPERATOR).describe_addresses(AllocationIds=[allocation])["Addresses"]
    assert "AssociationId" not in seen

    # And AssociateAddress takes it as any other
    client(OPERATOR).associate_address(AllocationId=allocation, InstanceId=running, AllowReassociation=False)
    (seen,) = client(OPERATOR).describe_addresses(AllocationIds=[allocation])["Addresses"]
    assert seen["InstanceId"] == running
