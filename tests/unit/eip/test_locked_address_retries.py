"""An address AWS locked (ReleaseAddress refused: InvalidAddress.Locked) is told once, by whoever meets it first (the
instance's release or a sweep), tried again at a growing interval, and released at the first try after AWS
Support unlocks it (nodecycle.domain.eip.locked)."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta

from nodecycle.domain.eip.locked import LOCK_RETRY_FIRST, LOCK_RETRY_MAX, LockedReleases, Locks
from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.errors import TransientError
from nodecycle.domain.sweep.addresses import AddressSweep
from tests.support.fakes import FakeClock, FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, FakeLines, terminate_record
from tests.unit.sweeper.test_orphans import AMPLE

GRACE = timedelta(minutes=10)
SWEEP_EVERY = timedelta(minutes=5)


def sweep(ec2: FakeAddresses, lines: FakeLines, metrics: FakeMetrics, now: datetime) -> int:
    """One sweep at ``now``; the addresses it released."""
    locked = LockedReleases(owner=OWNER, locks=lines, metrics=metrics)
    part = AddressSweep(
        owner=OWNER, addresses=ec2, clock=FakeClock(now), metrics=metrics, grace=GRACE, locked=locked
    )
    return part(AMPLE).released


def test_a_locked_address_is_tried_at_a_growing_interval_told_once_and_released_once_unlocked() -> None:
    # Given an address left unassociated past the grace, which AWS has locked
    ec2 = FakeAddresses()
    address = ec2.add(allocated_for="i-0000000000000dead", allocated_at=T0 - timedelta(hours=1))
    ec2.locked.add(address)
    lines, metrics = FakeLines(), FakeMetrics()
    tried: list[timedelta] = []

    # When the sweeper runs every 5 minutes for a day
    for n in range(24 * 12):
        before = ec2.count("release")
        sweep(ec2, lines, metrics, T0 + n * SWEEP_EVERY)
        if ec2.count("release") > before:
            tried.append(n * SWEEP_EVERY)

    # Then it is told once, and tried at intervals that double from LOCK_RETRY_FIRST up to LOCK_RETRY_MAX (each
    # try at the first sweep due): a handful of calls a day, not one at each of the 288 sweeps
    assert metrics.counts["EipFailures"] == 1
    gaps = [later - earlier for earlier, later in itertools.pairwise(tried)]
    assert gaps[:3] == [LOCK_RETRY_FIRST, 2 * LOCK_RETRY_FIRST, 4 * LOCK_RETRY_FIRST]
    assert all(earlier <= later <= LOCK_RETRY_MAX for earlier, later in itertools.pairwise(gaps))
    assert gaps[-1] == LOCK_RETRY_MAX
    assert len(tried) <= 12

    # And once unlocked, the first sweep at its next try releases it (at most LOCK_RETRY_MAX + a sweep later)
    ec2.locked.clear()
    at = T0 + 24 * timedelta(hours=1)
    while address in ec2.eips:
        sweep(ec2, lines, metrics, at)
        at += SWEEP_EVERY
    assert at - T0 - timedelta(hours=24) <= LOCK_RETRY_MAX + SWEEP_EVERY
    assert metrics.counts["EipFailures"] == 1


def test_a_lock_the_instances_release_met_is_not_told_again_by_the_sweep() -> None:
    # Given an instance whose address AWS locked, its terminate releasing it (RELEASE_EIP leaves it to the sweeper)
    ec2 = FakeAddresses()
    ec2.launch("i-0000000000000a001")
    address = ec2.add(
        allocated_for="i-0000000000000a001", allocated_at=T0 - timedelta(days=1), on="i-0000000000000a001"
    )
    ec2.locked.add(address)
    lines, metrics = FakeLines(), FakeMetrics()
    locked = LockedReleases(owner=OWNER, locks=lines, metrics=metrics)
    step = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics, lines=lines, locked=locked)
    outcome = step(terminate_record("i-0000000000000a001"), T0)
    assert not outcome.again
    assert ec2.eips[address].association_id is None

    # When sweeps follow, every 5 minutes for an hour
    for n in range(12):
        sweep(ec2, lines, metrics, T0 + n * SWEEP_EVERY)

    # Then the lock is told once in all (by the release), and the sweeps try it at its next tries only
    assert metrics.counts["EipFailures"] == 1
    assert ec2.count("release") == 1 + 2  # the release's, then at 15 min and 45 min


def test_two_sweeps_at_once_tell_a_lock_once() -> None:
    # Given a locked address, and two sweeps that meet it at once (a schedule delivered twice)
    ec2 = FakeAddresses()
    address = ec2.add(allocated_for="i-0000000000000dead", allocated_at=T0 - timedelta(hours=1))
    ec2.locked.add(address)
    lines, metrics = FakeLines(), FakeMetrics()
    ec2.before["release"] = lambda _: sweep(ec2, lines, metrics, T0)

    # When both are refused the release
    sweep(ec2, lines, metrics, T0)

    # Then it is told once
    assert metrics.counts["EipFailures"] == 1
    assert ec2.count("release") == 2


def test_a_leak_is_released_though_the_locks_cannot_be_read() -> None:
    # Given a leak (no lock), and the table throttling the read of the locks remembered
    ec2 = FakeAddresses()
    leak = ec2.add(allocated_for="i-0000000000000dead", allocated_at=T0 - timedelta(hours=1))
    lines, metrics = FakeLines(), FakeMetrics()

    def throttled(owner: str) -> Locks:
        raise TransientError("ProvisionedThroughputExceededException")

    lines.locks = throttled  # type: ignore[method-assign]

    # When the sweeper runs, Then the leak is released all the same
    assert sweep(ec2, lines, metrics, T0) == 1
    assert leak not in ec2.eips
