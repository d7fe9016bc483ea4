"""AllowReassociation as EC2 takes it, in the sandbox's EC2 (nodecycle_sandbox/aws/ec2_addresses.py): false refuses
an address associated elsewhere; left out, it is true ("Reassociation is automatic, but you can specify false to
ensure the operation fails if the Elastic IP address is already associated with another resource"), so a call
that forgets it moves the address off its holder, as EC2 does; and nodecycle's EC2 adapter always sends false."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.ports.addresses import AddressAlreadyAssociated
from nodecycle_sandbox.aws.install import install
from tests.functions.eip.conftest import IMAGE


@pytest.fixture
def ec2() -> Iterator[Any]:
    install()
    with mock_aws():
        yield boto3.client("ec2", region_name="us-east-1")


def holder(ec2: Any, allocation_id: str) -> str | None:
    (found,) = ec2.describe_addresses(AllocationIds=[allocation_id])["Addresses"]
    return found.get("InstanceId")


def held_by_one_of_two(ec2: Any) -> tuple[str, str, str]:
    launched = ec2.run_instances(ImageId=IMAGE, MinCount=2, MaxCount=2, InstanceType="t4g.small")["Instances"]
    one, other = (instance["InstanceId"] for instance in launched)
    address = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(AllocationId=address, InstanceId=one, AllowReassociation=False)
    return address, one, other


def test_false_refuses_an_address_held_by_another_instance(ec2: Any) -> None:
    address, one, other = held_by_one_of_two(ec2)
    with pytest.raises(ClientError, match=r"Resource\.AlreadyAssociated"):
        ec2.associate_address(AllocationId=address, InstanceId=other, AllowReassociation=False)
    assert holder(ec2, address) == one


def test_left_out_it_is_true_and_the_address_moves_as_ec2_moves_it(ec2: Any) -> None:
    address, _, other = held_by_one_of_two(ec2)
    ec2.associate_address(AllocationId=address, InstanceId=other)
    assert holder(ec2, address) == other


def test_the_adapter_never_moves_an_address_off_its_holder(ec2: Any) -> None:
    # (the adapter sends AllowReassociation false on both of its paths: by instance, and by primary interface)
    address, one, other = held_by_one_of_two(ec2)
    sent: list[dict[str, Any]] = []
    ec2.meta.events.register(
        "provide-client-params.ec2.AssociateAddress", lambda params, **_: sent.append(params)
    )
    with pytest.raises(AddressAlreadyAssociated):
        Ec2Addresses(ec2).associate(address, other)
    assert holder(ec2, address) == one
    assert sent
    assert all(params.get("AllowReassociation") is False for params in sent)
