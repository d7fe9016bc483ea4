"""An address EC2 refuses to free for good (not a lock: a denial, an SCP's explicit deny, or DisassociateAddress's
documented refusal for the only public IPv4 address of an interface with a public DNS name) is told when first met
and again at each refused try, a growing interval apart, rather than fail every sweep (every 5 minutes, for ever);
and it is freed at the first try after the refusal is lifted (nodecycle.domain.eip.locked)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from nodecycle.domain.eip.locked import LOCK_RETRY_FIRST, LOCK_RETRY_MAX, LockedReleases
from nodecycle.domain.ports.addresses import AddressRefused
from nodecycle.domain.sweep.addresses import AddressSweep
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.support.fakes import FakeClock, FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, FakeLines
from tests.unit.sweeper.test_orphans import AMPLE

GRACE = timedelta(minutes=10)
SWEEP_EVERY = timedelta(minutes=5)
DENIED = "UnauthorizedOperation: You are not authorized to perform this operation. (explicit deny in an SCP)"


def sweep(ec2: FakeAddresses, lines: FakeLines, metrics: FakeMetrics, now: datetime) -> bool:
    """One sweep at ``now``; whether it failed."""
    locked = LockedReleases(owner=OWNER, locks=lines, metrics=metrics)
    part = AddressSweep(
        owner=OWNER, addresses=ec2, clock=FakeClock(now), metrics=metrics, grace=GRACE, locked=locked
    )
    try:
        part(AMPLE)
    except SweepFailed:
        return True
    return False


def refused_for_a_day(ec2: FakeAddresses, method: str) -> tuple[FakeLines, FakeMetrics, list[timedelta], int]:
    """Sweeps every 5 minutes for a day, EC2 refusing ``method`` at each call: the locks, the metrics, when the
    call was tried, and how many sweeps failed."""
    lines, metrics = FakeLines(), FakeMetrics()
    tried: list[timedelta] = []
    failed = 0
    for n in range(24 * 12):
        before = ec2.count(method)
        ec2.faults[method] = [AddressRefused(DENIED)]
        failed += sweep(ec2, lines, metrics, T0 + n * SWEEP_EVERY)
        if ec2.count(method) > before:
            tried.append(n * SWEEP_EVERY)
    ec2.faults[method] = []
    return lines, metrics, tried, failed


def assert_told_at_each_try_a_growing_interval_apart(
    metrics: FakeMetrics, tried: list[timedelta], failed: int
) -> None:
    gaps = [later - earlier for earlier, later in itertools.pairwise(tried)]
    assert gaps[:3] == [LOCK_RETRY_FIRST, 2 * LOCK_RETRY_FIRST, 4 * LOCK_RETRY_FIRST]
    assert gaps[-1] == LOCK_RETRY_MAX
    assert len(tried) <= 12
    # told at each refused try (periodically: at most LOCK_RETRY_MAX apart), not at each of the 288 sweeps
    assert metrics.counts["EipFailures"] == len(tried)
    assert failed == 0


def test_a_release_refused_for_good_is_told_at_each_try_a_growing_interval_apart_and_released_once_allowed() -> (
    None
):
    # Given an address left unassociated past the grace, whose release an explicit deny refuses
    ec2 = FakeAddresses()
    address = ec2.add(allocated_for="i-0000000000000dead", allocated_at=T0 - timedelta(hours=1))

    # When the sweeper runs every 5 minutes for a day
    lines, metrics, tried, failed = refused_for_a_day(ec2, "release")

    # Then it is tried, and told, at intervals that double up to LOCK_RETRY_MAX; no sweep fails for it
    assert_told_at_each_try_a_growing_interval_apart(metrics, tried, failed)

    # And once the deny is lifted, it is released at its next try (at most LOCK_RETRY_MAX and a sweep later)
    told = metrics.counts["EipFailures"]
    at = T0 + timedelta(hours=24)
    while address in ec2.eips:
        assert not sweep(ec2, lines, metrics, at)
        at += SWEEP_EVERY
    assert at - T0 - timedelta(hours=24) <= LOCK_RETRY_MAX + SWEEP_EVERY
    assert metrics.counts["EipFailures"] == told


def test_a_disassociation_refused_for_good_is_told_at_each_try_and_the_address_returned_once_allowed() -> (
    None
):
    # Given a pool address still on an instance that is going away, whose disassociation EC2 refuses (the only
    # public IPv4 address of an interface with a public DNS name)
    ec2 = FakeAddresses()
    ec2.launch("i-0000000000000a001", state="shutting-down")
    address = ec2.add(
        allocated_for="i-0000000000000a001",
        pool="spare",
        allocated_at=T0 - timedelta(days=1),
        on="i-0000000000000a001",
    )

    # When the sweeper runs every 5 minutes for a day
    lines, metrics, tried, failed = refused_for_a_day(ec2, "disassociate")

    # Then it is tried, and told, at intervals that double up to LOCK_RETRY_MAX; no sweep fails for it
    assert_told_at_each_try_a_growing_interval_apart(metrics, tried, failed)

    # And once EC2 allows it, the address is back in its pool at its next try
    at = T0 + timedelta(hours=24)
    while ec2.eips[address].association_id is not None:
        assert not sweep(ec2, lines, metrics, at)
        at += SWEEP_EVERY
    assert at - T0 - timedelta(hours=24) <= LOCK_RETRY_MAX + SWEEP_EVERY


def test_two_sweeps_at_once_tell_a_refusal_once() -> None:
    # Given an address whose release is refused for good, and two sweeps that meet it at once (a schedule
    # delivered twice)
    ec2 = FakeAddresses()
    ec2.add(allocated_for="i-0000000000000dead", allocated_at=T0 - timedelta(hours=1))
    lines, metrics = FakeLines(), FakeMetrics()
    ec2.faults["release"] = [AddressRefused(DENIED), AddressRefused(DENIED)]
    ec2.before["release"] = lambda _: sweep(ec2, lines, metrics, T0)

    # When both are refused the release
    assert not sweep(ec2, lines, metrics, T0)

    # Then it is told once
    assert metrics.counts["EipFailures"] == 1
    assert ec2.count("release") == 2


def test_a_refusal_remembered_for_one_association_does_not_hold_back_the_return_of_a_later_one() -> None:
    # Given a pool address whose disassociation from a going instance EC2 refused for hours (the only public
    # IPv4 address of its interface with a public DNS name: a refusal of that association, not of the address)
    ec2 = FakeAddresses()
    ec2.launch("i-0000000000000a001", state="shutting-down")
    address = ec2.add(
        allocated_for="i-0000000000000a001",
        pool="spare",
        allocated_at=T0 - timedelta(days=1),
        on="i-0000000000000a001",
    )
    lines, metrics = FakeLines(), FakeMetrics()
    ec2.faults["disassociate"] = [AddressRefused(DENIED)] * 5
    at = T0
    for _ in range(5):
        assert not sweep(ec2, lines, metrics, at)
        at = lines.locks(OWNER).by[address].next_try
    ec2.faults["disassociate"] = []
    # And EC2 disassociated it at the termination, a launch claimed it for a new instance, which is going too
    ec2.terminate("i-0000000000000a001")
    ec2.launch("i-0000000000000b002")
    ec2.associate(address, "i-0000000000000b002")
    ec2.instances["i-0000000000000b002"] = "shutting-down"
    now = at - LOCK_RETRY_MAX + timedelta(minutes=1)  # (hours before the remembered try)

    # When the sweeper meets the new association
    assert not sweep(ec2, lines, metrics, now)

    # Then it takes the address back to its pool at once: the refusal remembered was another association's
    assert ec2.eips[address].association_id is None


def test_a_disassociation_refused_does_not_hold_back_the_release_once_ec2_disassociated_the_address() -> None:
    # Given an address on a going instance whose disassociation EC2 refused (the only public IPv4 address of an
    # interface with a public DNS name), remembered for hours
    ec2 = FakeAddresses()
    ec2.launch("i-0000000000000a001", state="shutting-down")
    address = ec2.add(
        allocated_for="i-0000000000000a001", allocated_at=T0 - timedelta(hours=1), on="i-0000000000000a001"
    )
    lines, metrics = FakeLines(), FakeMetrics()
    ec2.faults["disassociate"] = [AddressRefused(DENIED)] * 4
    at = T0
    for _ in range(4):
        assert not sweep(ec2, lines, metrics, at)
        at = lines.locks(OWNER).by[address].next_try
    ec2.faults["disassociate"] = []

    # When EC2 disassociated it at the termination, and the next sweep runs (before the remembered try)
    ec2.terminate("i-0000000000000a001")
    assert not sweep(ec2, lines, metrics, at - timedelta(hours=1))

    # Then the address is released: ReleaseAddress was never refused
    assert address not in ec2.eips
