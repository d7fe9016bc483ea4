"""The memory of the addresses AWS locked (``eip-locked#<owner>``) is advice: a table that throttles it must not hold
a lifecycle that met a lock (nodecycle.domain.eip.locked), and a lock remembered must never let the sweep
release an address associated since (invariant 4)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from nodecycle.domain.eip.locked import Lock, Locks
from nodecycle.domain.errors import TransientError
from tests.support.eip_lock_memory import (
    locked_on_its_instance,
    release_remembering_locks,
    sweep_remembering_locks,
)
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, FakeLines, terminate_record

INSTANCE = "i-0000000000000a001"


def test_a_lock_met_while_the_table_throttles_its_memory_does_not_hold_the_terminate() -> None:
    # Given an instance whose address AWS locked, and the table throttling the memory of the locks
    ec2, address = locked_on_its_instance(INSTANCE)
    lines, metrics = FakeLines(), FakeMetrics()

    def throttled(owner: str) -> Locks:
        raise TransientError("ProvisionedThroughputExceededException")

    lines.locks = throttled  # type: ignore[method-assign]
    step = release_remembering_locks(ec2, lines, metrics)

    # When its terminate releases its address
    outcome = step(terminate_record(INSTANCE), T0)

    # Then the lifecycle goes on as it did before locks were remembered (the lock told, left to the sweeper):
    # neither retried nor waited on for a table the release does not need
    assert not outcome.again
    assert ec2.eips[address].association_id is None
    assert metrics.counts["EipFailures"] == 1


def test_a_lock_whose_write_keeps_losing_does_not_hold_the_terminate() -> None:
    # Given a locked address, and its memory written over by others at each of the writes (a contended item)
    ec2, _ = locked_on_its_instance(INSTANCE)
    lines, metrics = FakeLines(), FakeMetrics()

    def lost(owner: str, locks: Mapping[str, Lock], expected_version: int) -> bool:
        return False

    lines.keep_locks = lost  # type: ignore[method-assign]
    step = release_remembering_locks(ec2, lines, metrics)

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
    sweep_remembering_locks(ec2, lines, metrics)

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
    sweep_remembering_locks(ec2, lines, metrics)

    # Then the gone one's entry is dropped (the item does not grow with every address ever locked), the other kept
    assert set(lines.locked[OWNER].by) == {still}
    assert lines.locked[OWNER].by[still].tries == 10
