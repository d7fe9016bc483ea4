"""A document never written (the ConfigMap's first use, or deleted and created again mid-refresh) is seeded,
at its first write, with the drains in progress its nodes show: one list, then never again."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from nodecycle.domain.budget import BudgetDocument, BudgetLimits, DisruptionBudget, SlotReason, SlotRequest
from nodecycle.domain.budget.rules import MAX_DOCUMENT_BYTES
from nodecycle.domain.budget.seed import DrainInProgress, seeded
from nodecycle.domain.policy import Quantity
from tests.unit.budget.conftest import TTL
from tests.unit.budget.fakes import (
    START,
    FakeClock,
    FakeInventory,
    MemoryBudgetStore,
    RecordingMetrics,
    slot,
)


class FakeDrains:
    def __init__(self, *drains: DrainInProgress) -> None:
        self.drains = list(drains)
        self.calls = 0

    def drains_in_progress(self) -> list[DrainInProgress]:
        self.calls += 1
        return list(self.drains)


def drain(node: str, zone: str | None = "a", owner: str = "blue", minutes_ago: int = 5) -> DrainInProgress:
    request = slot(node, zone, owner)
    return DrainInProgress(
        node=node,
        zone=zone,
        owner=owner,
        instance_id=request.instance_id,
        record_id=request.record_id,
        token=f"tok-{node}",
        started=START - timedelta(minutes=minutes_ago),
    )


def request(node: str, zone: str | None = "a", owner: str = "blue") -> SlotRequest:
    base = slot(node, zone, owner)
    return SlotRequest(
        node=node,
        instance_id=base.instance_id,
        zone=zone,
        owner=owner,
        record_id=base.record_id,
        token=f"tok-{node}",
    )


def budget(
    store: MemoryBudgetStore,
    clock: FakeClock,
    drains: FakeDrains | None,
    *,
    owner: str = "blue",
    total: str = "2",
    per_zone: str = "2",
) -> DisruptionBudget:
    return DisruptionBudget(
        store=store,
        nodes=FakeInventory(),
        clock=clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse(total), Quantity.parse(per_zone)),
        holder_ttl=TTL,
        count_unavailable=False,
        owner=owner,
        drains=drains,
    )


def recreated(store: MemoryBudgetStore) -> None:
    store.uninstall()
    store.reinstall()


def test_the_first_write_to_a_recreated_document_counts_the_drains_in_progress_of_every_owner() -> None:
    # Given drains in progress of two stacks when the ConfigMap comes back empty
    store, clock = MemoryBudgetStore(), FakeClock()
    drains = FakeDrains(drain("n1"), drain("n2", owner="green", zone="b"))
    blue = budget(store, clock, drains)
    recreated(store)

    # When blue asks for a third node: blue's limit of 2 is taken by its drain and green's
    third = blue.acquire(request("n3"))

    # Then it waits, and the seed is written with the ask: each drain a holder of its own lifecycle and owner
    assert (third.granted, third.reason, third.holders) == (False, SlotReason.NO_ROOM, 2)
    stored = store.read()
    assert stored is not None
    assert not stored.unwritten
    held = {h.node: h for h in stored.holders}
    assert {n: (h.owner, h.record_id, h.token) for n, h in held.items()} == {
        "n1": ("blue", "rec-n1", "tok-n1"),
        "n2": ("green", "rec-n2", "tok-n2"),
    }
    assert held["n1"].renewed_at == START
    assert held["n1"].acquired_at == START - timedelta(minutes=5)
    # and green's drain renews its slot as before the deletion
    green = budget(store, clock, drains, owner="green")
    assert green.renew(request("n2", "b", "green")).reason is SlotReason.HELD


def test_the_nodes_are_listed_once_when_the_document_is_created_and_never_per_decision() -> None:
    store, clock = MemoryBudgetStore(), FakeClock()
    drains = FakeDrains(drain("n1"))
    blue = budget(store, clock, drains, total="10", per_zone="10")

    # The shipped ConfigMap (first use): seeded at the first write
    assert blue.acquire(request("n2")).granted
    for i in range(3, 8):
        clock.advance(30)
        assert blue.acquire(request(f"n{i}")).granted
        blue.renew(request("n2"))
        blue.release(f"n{i}", f"rec-n{i}", f"tok-n{i}")
    assert drains.calls == 1

    # Created again: once more
    recreated(store)
    assert blue.renew(request("n2")).granted
    assert drains.calls == 2


def test_a_release_or_a_sweep_writes_the_seed_too() -> None:
    store, clock = MemoryBudgetStore(), FakeClock()
    drains = FakeDrains(drain("n1"), drain("n2"))
    blue = budget(store, clock, drains)
    recreated(store)

    # A release that finds nothing of its own to give back still writes the seed
    assert blue.release("n9", "rec-n9", "tok-n9") == []
    stored = store.read()
    assert stored is not None
    assert {h.node for h in stored.holders} == {"n1", "n2"}


def test_a_stale_annotation_holds_its_seeded_slot_one_ttl_at_most() -> None:
    # Given a node whose annotation outlived its drain (its cleanup's PATCH not made yet, the sweeper not run)
    store, clock = MemoryBudgetStore(), FakeClock()
    blue = budget(store, clock, FakeDrains(drain("n1"), drain("n2")), total="2")
    recreated(store)
    assert not blue.acquire(request("n3")).granted

    # When one TTL passes with n2's lifecycle renewing and n1's not (it is over)
    for _ in range(6):
        clock.advance(TTL.total_seconds() / 6)
        assert blue.renew(request("n2")).granted

    # Then n1's seeded slot expired, and the waiter takes it
    assert blue.acquire(request("n3")).granted


def test_without_a_source_of_drains_a_document_is_not_seeded() -> None:
    store, clock = MemoryBudgetStore(), FakeClock()
    blue = budget(store, clock, None)
    assert blue.acquire(request("n1")).granted
    stored = store.read()
    assert stored is not None
    assert [h.node for h in stored.holders] == ["n1"]


def test_the_seed_keeps_the_document_under_its_bound_oldest_drains_first() -> None:
    doc = BudgetDocument(unwritten=True)
    many = [drain(f"node-{i:05d}-{'x' * 200}", minutes_ago=i % 50) for i in range(4000)]
    seed, holders = seeded(doc, many, now=START, ttl=TTL)
    assert 0 < len(holders) < len(many)
    assert len(seed.to_json()) <= MAX_DOCUMENT_BYTES
    assert not seed.unwritten
    kept = {h.node for h in holders}
    left = [d for d in many if d.node not in kept]
    assert min(h.acquired_at for h in holders) == START - timedelta(minutes=49)
    assert max(h.acquired_at for h in holders) <= min(d.started for d in left if d.started is not None)


def test_the_seed_leaves_a_node_the_document_names_already() -> None:
    store, clock = MemoryBudgetStore(), FakeClock()
    budget(store, clock, None).acquire(request("n1"))
    doc = store.read()
    assert doc is not None
    seed, holders = seeded(doc, [drain("n1"), drain("n2")], now=START, ttl=TTL)
    assert [h.node for h in holders] == ["n2"]
    assert [h.node for h in seed.holders] == ["n1", "n2"]


def test_two_writers_that_find_the_document_unwritten_at_once_seed_it_once() -> None:
    # Given the ConfigMap created again, and two containers asking at once: green writes between blue's read and
    # its write
    store, clock = MemoryBudgetStore(), FakeClock()
    drains = FakeDrains(drain("n1"), drain("n2", zone="b", owner="green"))
    blue = budget(store, clock, drains, total="4", per_zone="4")
    green = budget(store, clock, drains, owner="green", total="4", per_zone="4")
    recreated(store)
    store.interleave(lambda: green.acquire(request("n4", "c", "green")))

    # When blue asks
    assert blue.acquire(request("n3")).granted

    # Then its write lost the race, read green's seeded document again and listed nothing more: each drain in
    # progress is held once, beside the two grants
    assert store.conflicts_seen == 1
    assert drains.calls == 2  # blue's first read, green's: none on the retry
    stored = store.read()
    assert stored is not None
    assert sorted(h.node for h in stored.holders) == ["n1", "n2", "n3", "n4"]


def test_seeded_drains_past_the_limits_keep_only_the_slots_the_limits_allow_at_their_next_polls() -> None:
    # Given four drains in progress when the ConfigMap comes back empty, under a limit of 2: their nodes do not
    # tell which two held slots and which two had lost theirs and paused; a newcomer asks first, and waits
    store, clock = MemoryBudgetStore(), FakeClock()
    blue = budget(store, clock, FakeDrains(*(drain(f"n{i}") for i in range(1, 5))))
    recreated(store)
    assert not blue.acquire(request("n9")).granted

    # When each of them polls (the EVICT step's renewal: disruption in progress)
    clock.advance(5)
    decisions = [blue.renew(replace(request(f"n{i}"), in_progress=True)) for i in range(1, 5)]

    # Then two drain on and two wait in line (the first to ask, past the limit), ahead of the newcomer
    assert [(d.granted, d.reason) for d in decisions] == [
        (False, SlotReason.LOST),
        (False, SlotReason.LOST),
        (True, SlotReason.HELD),
        (True, SlotReason.HELD),
    ]
    stored = store.read()
    assert stored is not None
    assert sorted(h.node for h in stored.holders) == ["n3", "n4"]
    assert not any(h.seeded for h in stored.holders)
    assert [w.node for w in blue.snapshot().waiters] == ["n1", "n2", "n9"]
