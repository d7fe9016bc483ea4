"""A late delivery of a finished drain's step after the budget ConfigMap was created again.

A lifecycle that gave its slot back leaves a mark in the document (``released``) that refuses a late delivery
of one of its earlier steps (a duplicate whose write was retried past the release, whose commit loses): such
a request would take a slot that nothing gives back. The marks go with the ConfigMap when it is deleted and
created again, and the nodes do not tell them: the cleanup clears the drain's annotations, leaving no trace of
its lifecycle, so the seed cannot restore them. The budget tells the slot it gives then (``unmarked``: the
ConfigMap was created after the lifecycle began), and the drain's first ask reads its record for it: a lifecycle
over gives the slot back at once; one still draining keeps it (a renewal's: see test_late_polls_after_recreation.py).
The budget alone (an ask outside the step) still grants it: not counted twice (one holder per node, counted as any), never past the limits, idle
until the sweeper finds its lifecycle over (or its TTL ends): the last test guards that bound."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from kubernetes import client

from nodecycle.domain.budget import DisruptionBudget, SlotReason, SlotRequest, Verdict
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, node_name
from tests.integration.budget.recreation import acquire_step, drained_and_released, record_of, slot_of
from tests.integration.budget.test_configmap_recreated import budget_of, recreate_the_configmap, request
from tests.support.fakes import InMemoryRecords
from tests.unit.budget.fakes import FakeClock

__all__ = ["drained_and_released"]  # (imported from here by other tests)


def late_ask(
    api: client.CoreV1Api, budget: DisruptionBudget, records: InMemoryRecords, slot: SlotRequest
) -> Outcome:
    """A late delivery of node ``slot.node``'s first ask, with its record as it read it then (at its first
    step, under seq 1), whatever the record holds now."""
    record = record_of(slot, Step.ACQUIRE_SLOT, seq=1)
    return acquire_step(api, budget, records)(record, record.received_at + timedelta(minutes=1, seconds=5))


def test_a_late_delivery_of_a_finished_drain_takes_no_slot_after_the_configmap_is_recreated(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given node 0's drain over (its slot given back, its record done), then the ConfigMap created again
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue")
    slot = slot_of(0)
    drained_and_released(core, slot, clock)
    records = InMemoryRecords()
    records.create(record_of(slot, Step.DONE, seq=9))
    # (before the re-creation, its mark refuses it)
    assert blue.acquire(slot).reason is SlotReason.RELEASED
    recreate_the_configmap(server)
    clock.advance(5)

    # When a late delivery of its first ask runs
    late = late_ask(core, blue, records, slot)

    # Then it holds no slot (its commit loses: it only waits), and it is marked given back in the new document
    assert late.again
    assert blue.snapshot().holders == []
    assert blue.acquire(slot).reason is SlotReason.RELEASED


def test_a_late_delivery_of_a_drain_still_in_progress_keeps_the_slot_after_the_configmap_is_recreated(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given node 0's slot taken by its lifecycle, not yet claimed on the node (its cordon to come: the seed cannot
    # count it), and the ConfigMap created again
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue")
    slot = slot_of(0)
    assert blue.acquire(slot).granted
    records = InMemoryRecords()
    records.create(record_of(slot, Step.CORDON, seq=2))
    recreate_the_configmap(server)
    clock.advance(5)

    # When a late delivery of its first ask runs
    late = late_ask(core, blue, records, slot)

    # Then the slot is taken again, for that lifecycle, whose cordon finds it held
    assert (late.then, late.again) == (None, False)
    assert [(h.node, h.record_id) for h in blue.snapshot().holders] == [(slot.node, slot.record_id)]
    assert blue.renew(replace(slot, in_progress=True)).reason is SlotReason.HELD


def test_a_slot_a_late_delivery_took_after_the_configmap_was_recreated_is_freed_by_the_next_sweep(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 2, node 0's drain over, the ConfigMap created again, and then a late delivery of node 0's
    # ask, and the asks of nodes 1 and 2
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue")
    drained_and_released(core, request(0), clock)
    recreate_the_configmap(server)
    clock.advance(5)
    late = blue.acquire(request(0))
    first, second = blue.acquire(request(1)), blue.acquire(request(2))

    # Then the budget's limits hold whatever the late delivery took: two holders at most, one per node
    held = [h.node for h in blue.snapshot().holders]
    assert len(held) == len(set(held)) == 2
    assert [late.granted, first.granted, second.granted].count(True) == 2

    # And when the sweeper finds node 0's lifecycle over, its slot goes to the node waiting for it, woken
    def over(entries: object) -> Verdict:
        return Verdict(stale=frozenset({request(0).record_id}))

    swept = blue.sweep(stale=over)
    waiting = [r for r, d in ((request(1), first), (request(2), second)) if not d.granted]
    assert [h.node for h in swept.holders] == ([node_name(0)] if late.granted else [])
    assert list(swept.wake) == [r.record_id for r in waiting]
    assert sorted(h.node for h in blue.snapshot().holders) == [node_name(1), node_name(2)]
