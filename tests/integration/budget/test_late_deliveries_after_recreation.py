"""A late delivery of a finished drain's step after the budget ConfigMap was created again.

A lifecycle that gave its slot back leaves a mark in the document (``released``) that refuses a late delivery
of one of its earlier steps (a duplicate whose write was retried past the release, whose commit loses): such
a request would take a slot that nothing gives back. The marks go with the ConfigMap when it is deleted and
created again, and the nodes do not tell them: the cleanup clears the drain's annotations, leaving no trace of
its lifecycle, so the seed cannot restore them. A late delivery then takes a slot again: not counted twice (one
holder per node, counted as any), never past the limits, but held by a drain that is over, idle until the
sweeper finds its lifecycle over (or its TTL ends). These tests reproduce the gap and guard its bound."""

from __future__ import annotations

import pytest
from kubernetes import client

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import SlotReason, SlotRequest, Verdict
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, node_name
from tests.integration.budget.test_configmap_recreated import (
    budget_of,
    cordon,
    recreate_the_configmap,
    request,
)
from tests.unit.budget.fakes import FakeClock


def drained_and_released(api: client.CoreV1Api, slot: SlotRequest, clock: FakeClock) -> None:
    """Node ``slot.node``'s drain, from its slot to its cleanup: cordoned and annotated, then its annotations
    cleared (the node of a terminating instance stays cordoned) and its slot given back by its lifecycle."""
    budget = budget_of(api, clock, slot.owner)
    assert budget.acquire(slot).granted
    cordon(api, slot)
    cluster = KubeCluster(lambda: api.api_client)
    node = cluster.get_node(slot.node)
    assert node is not None
    cluster.release_node(node)
    assert budget.release(slot.node, slot.record_id, slot.token) == []


@pytest.mark.xfail(
    strict=True,
    reason="the marks that refuse a finished drain's late deliveries go with the ConfigMap, and its node keeps "
    "no trace of its lifecycle to seed them from (bounded: see the next test)",
)
def test_a_late_delivery_of_a_finished_drain_takes_no_slot_after_the_configmap_is_recreated(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue")
    drained_and_released(core, request(0), clock)
    # (before the re-creation, its mark refuses it)
    assert blue.acquire(request(0)).reason is SlotReason.RELEASED

    recreate_the_configmap(server)
    clock.advance(5)
    late = blue.acquire(request(0))

    assert (late.granted, late.reason) == (False, SlotReason.RELEASED)


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
