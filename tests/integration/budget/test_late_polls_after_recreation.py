"""A late poll of a finished drain's eviction after the budget ConfigMap was created again.

A drain's eviction polls renew its slot. A late delivery of one (a duplicate that read the record at its
eviction before the commit that went on, then ran after the whole drain: its completion, its cleanup's release)
is refused by the mark its lifecycle's release left (``released``), and its commit loses. Once the ConfigMap is
deleted and created again the mark is gone, and the node no longer names the lifecycle (its cleanup cleared the
annotations), so the seed does not count it either: the renewal finds no holder and takes the slot again
(``reacquired``), a slot nothing renews nor gives back, idle until the sweeper finds the lifecycle over or its
TTL ends, while nodes wait for it. The budget cannot vouch for such a slot (``unmarked``: its ConfigMap was
created after the lifecycle began), so it reads the lifecycle's record, as the first ask does (see
test_late_deliveries_after_recreation.py): over, the slot goes back at once, marked; a drain still running keeps
it. Driven through the Evict step, on the sandbox API server with the product's adapters."""

from __future__ import annotations

from dataclasses import replace

from kubernetes import client

from nodecycle.domain.budget import SlotReason
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import node_name
from tests.integration.budget.recreation import (
    BEGAN,
    budget_of,
    drained_and_released,
    evict_step,
    in_progress,
    lifecycle_of,
    six_nodes,
    slot_of,
)
from tests.integration.budget.test_configmap_recreated import TTL, recreate_the_configmap

__all__ = ["BEGAN", "budget_of", "lifecycle_of", "slot_of"]  # (imported from here by other tests)


def test_a_late_poll_of_a_finished_drain_takes_no_slot_after_the_configmap_is_recreated(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 2, node 0's drain over (its slot given back, its record done, its instance terminating),
    # then the ConfigMap created again and node 1's drain holding a slot in it
    clock, records, blue = six_nodes(server, core)
    slot = slot_of(0)
    drained_and_released(core, slot, clock)
    records.create(lifecycle_of(slot, Step.DONE, seq=9))
    recreate_the_configmap(server)
    clock.advance(5)
    assert blue.acquire(slot_of(1)).granted

    # When a late delivery of node 0's eviction poll runs
    late = evict_step(core, blue, slot, "shutting-down")(lifecycle_of(slot, Step.EVICT, seq=3), clock.now())

    # Then node 0 holds no slot (the poll's commit loses: nothing else would give it back), it is marked given
    # back in the new document, and the slot is there for node 2
    assert late.again
    assert [h.node for h in blue.snapshot().holders] == [node_name(1)]
    assert blue.renew(replace(slot, in_progress=True)).reason is SlotReason.RELEASED
    assert blue.acquire(slot_of(2)).granted


def test_a_poll_of_a_drain_still_running_keeps_the_slot_it_takes_again_after_the_configmap_is_recreated(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given node 0's drain in progress (slot held, node claimed, record at its eviction), the ConfigMap created
    # again and seeded by node 1's ask, then node 0's polls late past the seeded holder's TTL (a slow API server)
    clock, records, blue = six_nodes(server, core)
    slot = slot_of(0)
    in_progress(core, blue, records, slot)
    recreate_the_configmap(server)
    clock.advance(5)
    assert blue.acquire(slot_of(1)).granted
    assert [h.seeded for h in blue.snapshot().holders if h.node == slot.node] == [True]
    clock.advance(TTL.total_seconds() + 1)

    # When its next poll runs
    polled = evict_step(core, blue, slot)(lifecycle_of(slot, Step.EVICT, seq=3), clock.now())

    # Then it takes its slot again and goes on draining (no pods: the node is drained): its own slot, renewed by
    # its polls and given back by its cleanup
    assert (polled.then, polled.again) == (None, False)
    assert [(h.node, h.record_id) for h in blue.snapshot().holders] == [(slot.node, slot.record_id)]
    assert blue.renew(replace(slot, in_progress=True)).reason is SlotReason.HELD
