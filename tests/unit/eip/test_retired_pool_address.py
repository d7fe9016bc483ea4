"""Whoever asks (the release step, the sweep, a launch's spares), an address is released only if its tags, read right
before the release, say it is no pool's and was allocated into none (``nodecycle:allocated-into``, nodecycle's own
at an allocation into a pool): a listing's view of it may be older than a tag change."""

from __future__ import annotations

import pytest

from nodecycle.domain.eip import release_unassociated
from nodecycle.domain.ports.addresses import ALLOCATED_INTO_TAG, POOL_TAG
from tests.unit.eip.fakes import FakeAddresses

INSTANCE = "i-0a1b2c3d4e5f60718"


@pytest.mark.parametrize("tag", [POOL_TAG, ALLOCATED_INTO_TAG])
def test_an_address_whose_tags_say_it_is_a_pools_is_never_released(tag: str) -> None:
    ec2 = FakeAddresses()
    address = ec2.add(allocated_for=INSTANCE)
    ec2.eips[address].tags[tag] = "ci"

    assert release_unassociated(ec2, address) is False
    assert address in ec2.eips
    assert "release" not in ec2.calls


def test_an_address_allocated_for_an_instance_is_released() -> None:
    ec2 = FakeAddresses()
    address = ec2.add(allocated_for=INSTANCE)

    assert release_unassociated(ec2, address) is True
    assert address not in ec2.eips
