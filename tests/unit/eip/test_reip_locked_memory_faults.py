"""The memory of the addresses AWS locked (``eip-locked#<owner>``) is advice: a table that throttles it must not hold
a lifecycle that met a lock (nodecycle.domain.eip.locked), and a lock remembered must never let the sweep
release an address associated since (invariant 4)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from nodecycle.domain.eip.locked import Lock, LockedReleases, Locks
from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.errors import TransientError
from nodecycle.domain.sweep.addresses import AddressSweep
from tests.support.fakes import FakeClock, FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, FakeLines, terminate_record
from tests.unit.sweeper.test_orphans import AMPLE

INSTANCE = "i-0000000000000a001"


def test_a_lock_met_while_the_table_throttles_its_memory_does_not_hold_the_terminate() -> None:
    # Given an instance whose address AWS locked, and the table throttling the memory of the locks
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    address = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(days=1), on=INSTANCE)
    ec2.locked.add(address)
    lines, metrics = FakeLines(), FakeMetrics()

    def throttled(owner: str) -> Locks:
        raise TransientError("ProvisionedThroughputExceededException")

    lines.locks = throttled  # type: ignore[method-assign]
    locked = LockedReleases(owner=OWNER, locks=lines, metrics=metrics)
    step = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics, lines=lines, locked=locked)

    # When its terminate releases its address
    outcome = step(terminate_record(INSTANCE), T0)

    # Then the lifecycle goes on as it did before locks were remembered (the lock told, left to the sweeper):
    # neither retried nor waited on for a table the release does not need
    assert not outcome.again
    assert ec2.eips[address].association_id is None
    assert metrics.counts["EipFailures"] == 1


def test_a_lock_whose_write_keeps_losing_does_not_hold_the_terminate() -> None:
    # Given a locked address, and its memory written over by others at each of the writes (a contended item)
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    address = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(days=1), on=INSTANCE)
    ec2.locked.add(address)
    lines, metrics = FakeLines(), FakeMetrics()

    def lost(owner: str, locks: Mapping[str, Lock], expected_version: int) -> bool:
        return False

    lines.keep_locks = lost  # type: ignore[method-assign]
    locked = LockedReleases(owner=OWNER, locks=lines, metrics=metrics)
    step = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics, lines=lines, locked=locked)

    # When its terminate releases its address, Then the lifecycle goes on, the lock told
    assert not step(terminate_record(INSTANCE), T0).again
    assert metrics.counts["EipFailures"] == 1


def test_a_lock_due_again_never_releases_an_address_associated_since() -> None:
    # Given an address remembered locked (due for its next try), which an operator unlocks and puts on a live
    # instance right after the sweep listed it unassociated
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    address = ec2.add(allocated_for="i-0000000000000dead", allocated_at=T0 - timedelta(hours=1))
    lines, metrics = FakeLines(), FakeMetrics()
    lines.locked[OWNER] = Locks(
        by={address: Lock(since=T0 - timedelta(hours=2), tries=3, next_try=T0 - timedelta(minutes=1))},
        version=3,
    )
    ec2.after["find"] = lambda *_: ec2.take(address, INSTANCE)

    # When the sweep runs at its next try
    part = AddressSweep(
        owner=OWNER,
        addresses=ec2,
        clock=FakeClock(T0),
        metrics=metrics,
        grace=timedelta(minutes=10),
        locked=LockedReleases(owner=OWNER, locks=lines, metrics=metrics),
    )
    part(AMPLE)

    # Then the address stays on its instance
    assert address in ec2.eips
    assert ec2.eips[address].instance_id == INSTANCE
    assert ec2.count("release") == 0


def test_a_lock_of_an_address_gone_since_is_dropped_from_the_memory_at_a_later_write() -> None:
    # Given two addresses remembered locked: one an operator released by hand since (no sweep lists it again), the
    # other still locked
    ec2 = FakeAddresses()
    gone = "eipalloc-released-by-hand"
    still = ec2.add(allocated_for="i-0000000000000dead", allocated_at=T0 - timedelta(days=3))
    ec2.locked.add(still)
    lines, metrics = FakeLines(), FakeMetrics()
    lines.locked[OWNER] = Locks(
        by={
            gone: Lock(since=T0 - timedelta(days=3), tries=5, next_try=T0 - timedelta(days=2)),
            still: Lock(since=T0 - timedelta(days=3), tries=9, next_try=T0 - timedelta(minutes=1)),
        },
        version=14,
    )

    # When the sweep tries the one still locked again
    part = AddressSweep(
        owner=OWNER,
        addresses=ec2,
        clock=FakeClock(T0),
        metrics=metrics,
        grace=timedelta(minutes=10),
        locked=LockedReleases(owner=OWNER, locks=lines, metrics=metrics),
    )
    part(AMPLE)

    # Then the gone one's entry is dropped (the item does not grow with every address ever locked), the other kept
    assert set(lines.locked[OWNER].by) == {still}
    assert lines.locked[OWNER].by[still].tries == 10
