"""Elastic IPs: FakeAddresses (the unit tests') and Ec2Addresses on moto with the sandbox's EC2 answers (where
moto 5 is kinder than EC2: AllowReassociation, the release of an address in use, the quota, terminated
instances) answer alike, in the domain's exceptions.

What the domain relies on: an address is found by its tags and its instance; one EC2 does not know is
AddressNotFound to describe, and False to release or disassociate (already gone); AssociateAddress without
reassociation refuses an address associated already (AddressAlreadyAssociated) and an instance pending or
gone (InstanceUnavailable), takes a stopped one, and moves an instance's address off it for the new one; an
address in use is not released (AddressInUse) in the cluster's nondefault VPC; the quota refuses one more
(AddressLimitExceeded); a terminated instance's addresses are disassociated and stay allocated."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import pytest
from moto.core import DEFAULT_ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.ports.addresses import (
    INSTANCE_TAG,
    OWNER_TAG,
    POOL_TAG,
    Address,
    AddressAlreadyAssociated,
    Addresses,
    AddressInUse,
    AddressLimitExceeded,
    AddressNotFound,
    InstanceUnavailable,
)
from nodecycle_sandbox.aws import ec2_addresses, install
from tests.contracts.conftest import REGION, aws
from tests.unit.eip.fakes import FakeAddresses

OWNER = "stack-a"
QUOTA = 5  # AWS's default Elastic IP quota per Region
UNKNOWN_ALLOCATION = "eipalloc-0123456789abcdef0"
UNKNOWN_ASSOCIATION = "eipassoc-0123456789abcdef0"


class Side(Protocol):
    port: Addresses

    def launch(self) -> str: ...

    def terminate(self, instance_id: str) -> None: ...

    def stop(self, instance_id: str) -> None: ...


class FakeSide:
    def __init__(self) -> None:
        # (settling 0: the fake's refusal of a release right after a disassociation is stricter than the
        # sandbox's EC2, which releases at once; the test of it allows both)
        self.fake = FakeAddresses(quota=QUOTA, settling=0)
        self.port: Addresses = self.fake
        self._ids = (f"i-{n:017x}" for n in range(1, 100))

    def launch(self) -> str:
        return self.fake.launch(next(self._ids))

    def terminate(self, instance_id: str) -> None:
        self.fake.terminate(instance_id)

    def stop(self, instance_id: str) -> None:
        self.fake.instances[instance_id] = "stopped"


class Ec2Side:
    def __init__(self) -> None:
        self.ec2 = aws("ec2")
        self.port: Addresses = Ec2Addresses(self.ec2)
        ec2_addresses.set_quota(ec2_backends[DEFAULT_ACCOUNT_ID][REGION], QUOTA)

    def launch(self) -> str:
        launched = self.ec2.run_instances(
            ImageId="ami-12c6146b", MinCount=1, MaxCount=1, InstanceType="m5.large"
        )
        return str(launched["Instances"][0]["InstanceId"])

    def terminate(self, instance_id: str) -> None:
        self.ec2.terminate_instances(InstanceIds=[instance_id])

    def stop(self, instance_id: str) -> None:
        self.ec2.stop_instances(InstanceIds=[instance_id])


@pytest.fixture(params=["fake", "ec2"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    if request.param == "fake":
        yield FakeSide()
        return
    install()
    request.getfixturevalue("moto")
    ec2 = Ec2Side()
    yield ec2
    # the next test's account holds no address (the quota counts them all)
    for address in ec2.ec2.describe_addresses()["Addresses"]:
        if address.get("AssociationId"):
            ec2.ec2.disassociate_address(AssociationId=address["AssociationId"])
        ec2.ec2.release_address(AllocationId=address["AllocationId"])


def allocate(side: Side, **tags: str) -> Address:
    return side.port.allocate({OWNER_TAG: OWNER, **tags})


def test_an_allocated_address_is_found_by_its_tags_and_its_instance(side: Side) -> None:
    pooled = allocate(side, **{POOL_TAG: "blue"})
    mine = allocate(side, **{INSTANCE_TAG: "i-00000000000000042"})
    side.port.allocate({OWNER_TAG: "stack-b"})
    instance = side.launch()
    side.port.associate(pooled.allocation_id, instance)

    def ids(found: list[Address]) -> set[str]:
        return {address.allocation_id for address in found}

    assert ids(side.port.find(OWNER)) == {pooled.allocation_id, mine.allocation_id}
    assert ids(side.port.find(OWNER, pool="blue")) == {pooled.allocation_id}
    assert ids(side.port.find(OWNER, allocated_for="i-00000000000000042")) == {mine.allocation_id}
    assert ids(side.port.find(OWNER, instance_id=instance)) == {pooled.allocation_id}
    assert side.port.find(OWNER, pool="green") == []
    assert side.port.describe(mine.allocation_id).tags == {
        OWNER_TAG: OWNER,
        INSTANCE_TAG: "i-00000000000000042",
    }


def test_an_address_ec2_does_not_know_is_not_found_or_already_gone(side: Side) -> None:
    with pytest.raises(AddressNotFound):
        side.port.describe(UNKNOWN_ALLOCATION)
    with pytest.raises(AddressNotFound):
        side.port.associate(UNKNOWN_ALLOCATION, side.launch())
    assert side.port.release(UNKNOWN_ALLOCATION) is False
    assert side.port.disassociate(UNKNOWN_ASSOCIATION) is False


def test_an_association_shows_in_the_address_and_ends_once(side: Side) -> None:
    address = allocate(side)
    instance = side.launch()

    association = side.port.associate(address.allocation_id, instance)

    described = side.port.describe(address.allocation_id)
    assert (described.instance_id, described.association_id) == (instance, association)
    assert [a.allocation_id for a in side.port.on_primary_ip(instance)] == [address.allocation_id]
    assert side.port.disassociate(association) is True
    assert side.port.disassociate(association) is False  # its own retry: already gone
    described = side.port.describe(address.allocation_id)
    assert (described.instance_id, described.association_id) == (None, None)


def test_an_address_associated_already_is_refused_without_reassociation(side: Side) -> None:
    address = allocate(side)
    first, second = side.launch(), side.launch()
    side.port.associate(address.allocation_id, first)

    with pytest.raises(AddressAlreadyAssociated):
        side.port.associate(address.allocation_id, second)
    assert side.port.describe(address.allocation_id).instance_id == first


def test_an_association_sent_again_leaves_the_address_where_it_is(side: Side) -> None:
    # (EC2, as the sandbox answers, takes the same place again as no move; the fake refuses it as associated
    # already, which is stricter: the step reads the address then, and finds it on its instance)
    address = allocate(side)
    instance = side.launch()
    side.port.associate(address.allocation_id, instance)

    try:
        side.port.associate(address.allocation_id, instance)
    except AddressAlreadyAssociated:
        assert isinstance(side, FakeSide)
    assert side.port.describe(address.allocation_id).instance_id == instance


def test_a_second_address_moves_the_instances_first_off_it(side: Side) -> None:
    first, second = allocate(side), allocate(side)
    instance = side.launch()
    side.port.associate(first.allocation_id, instance)

    side.port.associate(second.allocation_id, instance)

    assert side.port.describe(first.allocation_id).instance_id is None  # still allocated
    assert side.port.describe(second.allocation_id).instance_id == instance


def test_an_instance_that_does_not_run_takes_no_address(side: Side) -> None:
    address = allocate(side)
    instance = side.launch()
    side.terminate(instance)

    with pytest.raises(InstanceUnavailable):
        side.port.associate(address.allocation_id, instance)
    with pytest.raises(InstanceUnavailable):
        side.port.associate(address.allocation_id, "i-0000000000000dead")  # one EC2 never had
    assert side.port.describe(address.allocation_id).association_id is None


def test_a_stopped_instance_keeps_its_address_and_takes_one(side: Side) -> None:
    # (in a VPC an address stays with an instance that stops, and AssociateAddress takes a stopped instance: EC2
    # refuses only one pending, shutting down or terminated)
    kept, taken = allocate(side), allocate(side)
    first, second = side.launch(), side.launch()
    side.port.associate(kept.allocation_id, first)
    side.stop(first)
    side.stop(second)

    association = side.port.associate(taken.allocation_id, second)

    assert side.port.describe(kept.allocation_id).instance_id == first
    described = side.port.describe(taken.allocation_id)
    assert (described.instance_id, described.association_id) == (second, association)
    assert side.port.instance_states([first, second]) == {first: "stopped", second: "stopped"}


def test_a_terminated_instances_address_is_disassociated_and_stays_allocated(side: Side) -> None:
    address = allocate(side)
    instance = side.launch()
    side.port.associate(address.allocation_id, instance)

    side.terminate(instance)

    described = side.port.describe(address.allocation_id)
    assert (described.instance_id, described.association_id) == (None, None)
    assert side.port.find(OWNER, instance_id=instance) == []
    assert side.port.instance_states([instance, "i-0000000000000dead"]) == {instance: "terminated"}


def test_an_address_in_use_is_not_released(side: Side) -> None:
    address = allocate(side)
    instance = side.launch()
    association = side.port.associate(address.allocation_id, instance)

    with pytest.raises(AddressInUse):
        side.port.release(address.allocation_id)
    assert side.port.describe(address.allocation_id).instance_id == instance

    side.port.disassociate(association)
    assert side.port.release(address.allocation_id) is True
    assert side.port.release(address.allocation_id) is False  # its own retry: gone already
    with pytest.raises(AddressNotFound):
        side.port.describe(address.allocation_id)


def test_the_quota_refuses_one_address_more(side: Side) -> None:
    allocated = [allocate(side) for _ in range(QUOTA)]
    with pytest.raises(AddressLimitExceeded):
        allocate(side)
    assert len(side.port.find(OWNER)) == QUOTA
    assert side.port.release(allocated[0].allocation_id)
    allocate(side)  # room again


def test_an_instance_ec2_does_not_know_has_no_state_and_no_launch_time(side: Side) -> None:
    instance = side.launch()
    assert side.port.instance_states([instance]) == {instance: "running"}
    assert side.port.launched_at(instance) is not None
    assert side.port.launched_at("i-0000000000000dead") is None


def test_an_instances_state_and_launch_time_come_in_one_answer(side: Side) -> None:
    # (the stop's release reads them together: launch_state agrees with instance_states and launched_at, one
    # answer of one moment; an instance EC2 does not know has neither)
    instance = side.launch()
    state = side.port.launch_state(instance)
    assert state == ("running", side.port.launched_at(instance))
    assert state[1] is not None
    side.stop(instance)
    assert side.port.launch_state(instance) == ("stopped", side.port.launched_at(instance))
    assert side.port.launch_state("i-0000000000000dead") is None
