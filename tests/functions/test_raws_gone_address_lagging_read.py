"""A refused address call (the template's grant is on addresses carrying the owner tag) is told "gone" by a
DescribeAddresses right after it (``addresses._unless_gone``). EC2's reads lag its writes ("Eventual consistency in
the Amazon EC2 API"): that look comes within a round trip of the release it asks about, where a lagging read still
lists an address released since: a release (a disassociation) whose first attempt landed, its answer lost, was
refused at botocore's retry (the address gone, no tags) and, the look still showing it, taken for a refusal: asked
again, found gone then, and never counted released (nor as room under the quota). On moto with the sandbox's IAM
enforcement, the EIP role as the template writes it, and EC2 lagging for the role (``ec2_consistency``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.eip import release_unassociated
from nodecycle.domain.ports.addresses import OWNER_TAG, AddressRefused
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import addresses, allocate, run_instances
from tests.functions.eip.test_gone_address_refused import KEY, as_role, ended_before
from tests.unit.eip.fakes import OWNER

__all__ = ["as_role"]  # (the fixture, imported to be used here)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def lagging() -> Iterator[Clock]:
    clock = Clock()
    LAG.arm(5.0, callers=[KEY], clock=clock)
    try:
        yield clock
    finally:
        LAG.disarm()


def test_a_release_whose_answer_was_lost_is_not_a_refusal_while_ec2_still_lists_the_address(
    as_role: Callable[[], Any], lagging: Clock
) -> None:
    # Given an address of this owner, whose release's first attempt lands but whose answer is lost, and EC2's reads
    # (the role's) still listing it
    address = allocate(**{OWNER_TAG: OWNER})
    lagging.now += 10  # (its allocation long seen)
    ec2 = ended_before(as_role(), "ReleaseAddress", lost=True)

    # When the EIP function's role releases it
    try:
        released = release_unassociated(Ec2Addresses(ec2), address)
    except AddressRefused as refused:
        pytest.fail(f"the release this call made was taken for a refusal: {refused}")

    # Then it was this call's
    assert released is True
    assert addresses() == []


def test_a_disassociation_whose_answer_was_lost_is_not_a_refusal_while_ec2_still_shows_it(
    as_role: Callable[[], Any], lagging: Clock
) -> None:
    # Given an address of this owner on an instance, whose disassociation's first attempt lands but whose answer is
    # lost, and EC2's reads (the role's) still showing the association
    (instance,) = run_instances(1)
    address = allocate(**{OWNER_TAG: OWNER})
    association = boto3.client("ec2").associate_address(AllocationId=address, InstanceId=instance)
    lagging.now += 10  # (its association long seen)
    ec2 = ended_before(as_role(), "DisassociateAddress", lost=True)

    # When the role disassociates it, Then it was this call's (before: AddressRefused, asked again)
    assert Ec2Addresses(ec2).disassociate(association["AssociationId"]) is True


def test_a_real_refusal_of_an_address_allocated_moments_ago_is_no_gone_address(
    as_role: Callable[[], Any], lagging: Clock
) -> None:
    # Given an address of another owner allocated moments ago (the role's reads do not list it yet)
    theirs = allocate(**{OWNER_TAG: "someone-else"})

    # When the role releases it, Then it is refused or left (never counted released), and it stays
    adapter = Ec2Addresses(as_role())
    with contextlib.suppress(AddressRefused):
        assert adapter.release(theirs) is False
    assert [a["AllocationId"] for a in addresses()] == [theirs]
