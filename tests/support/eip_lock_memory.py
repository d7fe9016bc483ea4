"""What the tests of the memory of the addresses AWS locked (``eip-locked#<owner>``: nodecycle.domain.eip.locked)
share: an instance's address that AWS locked, and the RELEASE_EIP step and the sweep of addresses wired to remember
the locks they meet in ``lines``, on the unit tests' fakes."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.eip.locked import LockedReleases
from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.sweep.addresses import AddressSweep, AddressSweepReport
from nodecycle.domain.sweep.sweep_time import SweepTime
from tests.support.fakes import FakeClock, FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, FakeLines

GRACE = timedelta(minutes=10)  # the sweep's grace for an unassociated address
# A sweep's time when the test is not about it (as tests.unit.sweeper.test_orphans.AMPLE, whose module is some 130
# modules more to import)
AMPLE = SweepTime(lambda: 300, timedelta())


def locked_on_its_instance(instance: str) -> tuple[FakeAddresses, str]:
    """EC2 with ``instance`` running and an address allocated for it a day ago, associated with it, that AWS locked:
    EC2 and the address's allocation id."""
    ec2 = FakeAddresses()
    ec2.launch(instance)
    address = ec2.add(allocated_for=instance, allocated_at=T0 - timedelta(days=1), on=instance)
    ec2.locked.add(address)
    return ec2, address


def release_remembering_locks(ec2: FakeAddresses, lines: FakeLines, metrics: FakeMetrics) -> ReleaseAddresses:
    """The RELEASE_EIP step as the eip function wires it: the locks it meets remembered in ``lines``."""
    locked = LockedReleases(owner=OWNER, locks=lines, metrics=metrics)
    return ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics, lines=lines, locked=locked)


def sweep_remembering_locks(
    ec2: FakeAddresses, lines: FakeLines, metrics: FakeMetrics, now: datetime = T0
) -> AddressSweepReport:
    """One sweep of the addresses at ``now`` as the sweeper wires it: the locks remembered in ``lines``."""
    locked = LockedReleases(owner=OWNER, locks=lines, metrics=metrics)
    part = AddressSweep(
        owner=OWNER, addresses=ec2, clock=FakeClock(now), metrics=metrics, grace=GRACE, locked=locked
    )
    return part(AMPLE)
