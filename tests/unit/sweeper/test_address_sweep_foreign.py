"""The sweeper's EIP part and addresses that look like this owner's but that nodecycle did not allocate: tagged
by hand (or by another tool) with ``nodecycle:owner``, without ``nodecycle:allocated-at``, and in no pool. The
rule (domain/sweep/addresses.py): not nodecycle's, left alone, with a warning."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.sweep.addresses import AddressSweep, AddressSweepReport
from tests.support.fakes import FakeClock, FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses
from tests.unit.sweeper.test_orphans import AMPLE

GRACE = timedelta(minutes=10)
GONE = "i-0a1b2c3d4e5f60718"


def sweep(ec2: FakeAddresses) -> AddressSweepReport:
    return AddressSweep(owner=OWNER, addresses=ec2, clock=FakeClock(T0), metrics=FakeMetrics(), grace=GRACE)(
        AMPLE
    )


@pytest.mark.parametrize("where", ["interface", "instance"])
def test_an_address_tagged_by_hand_is_left_associated_where_it_is(
    where: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an address an operator tagged with this owner (and the instance it was once used for, terminated
    # since) but nodecycle never allocated (no allocation time): kept on the network interface that outlived
    # that instance (DeleteOnTermination off: a static interface moved to its replacement by hand), or still
    # on the instance while it shuts down
    ec2 = FakeAddresses(quota=10)
    ec2.launch(GONE, "terminated" if where == "interface" else "shutting-down")
    address = ec2.add(allocated_for=GONE, allocated_at=None)
    if where == "interface":
        ec2.eips[address].association_id = "eipassoc-eni"  # on eni-..., no instance
    else:
        ec2.take(address, GONE)
    association = ec2.eips[address].association_id

    # When the sweeper runs
    report = sweep(ec2)

    # Then it is not nodecycle's: left where it is (before: disassociated as if nodecycle had allocated it),
    # with a warning that names it
    assert ec2.eips[address].association_id == association
    assert report == AddressSweepReport(released=0, returned=0, kept=1)
    assert "not nodecycle's" in caplog.text
