"""The budget ConfigMap deleted and re-created while drains are in progress (`kubectl delete`, a namespace
re-created by GitOps, an operator "resetting" a stuck budget, then `kubectl apply -f deploy/rbac.yaml`): the
ConfigMap comes back empty, its holders forgotten. The drains in progress are still marked on their nodes
(cordon, and the owner and in-progress annotations the drain's claim sets, through the product's KubeCluster),
and the first write to the new document counts them, so no new grant exceeds the budget (invariant 1) even
without BudgetCountUnavailable, which would count their cordons anyway."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import (
    BudgetNotInstalled,
    ConfigMapBudgetStore,
    KubeDrainsInProgress,
    KubeNodeInventory,
)
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import (
    BudgetLimits,
    DisruptionBudget,
    Lifecycles,
    SlotReason,
    SlotRequest,
    Verdict,
)
from nodecycle.domain.model import Transition, record_id
from nodecycle.domain.policy import Quantity
from nodecycle.domain.ports.cluster import Claim
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import (
    NAMESPACE,
    RBAC,
    add_nodes,
    admin_api,
    core_api,
    instance_of,
    node_name,
    zone_of,
)
from tests.integration.budget.drains import SharedMetrics
from tests.unit.budget.fakes import FakeClock

TTL = timedelta(seconds=300)


def request(i: int, owner: str = "blue") -> SlotRequest:
    token = f"tok-{i}"
    return SlotRequest(
        node=node_name(i),
        instance_id=instance_of(i),
        zone=zone_of(i),
        owner=owner,
        record_id=record_id(instance_of(i), Transition.TERMINATING, token),
        token=token,
    )


def budget_of(
    api: client.CoreV1Api,
    clock: FakeClock,
    owner: str,
    total: str = "2",
    per_zone: str = "2",
    lifecycles: Lifecycles | None = None,
) -> DisruptionBudget:
    """Stack ``owner``'s budget as the drain function wires it: the ConfigMap's store, seeded from the nodes
    (and, with ``lifecycles``, the records that tell a slot the document cannot vouch for)."""
    return DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: api, NAMESPACE, sleep=lambda _: None),
        nodes=KubeNodeInventory(lambda: api, with_status=False),
        clock=clock,
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse(total), Quantity.parse(per_zone)),
        holder_ttl=TTL,
        count_unavailable=False,
        owner=owner,
        drains=KubeDrainsInProgress(lambda: api),
        lifecycles=lifecycles,
    )


def cordon(api: client.CoreV1Api, slot: SlotRequest) -> None:
    """The drain's claim of its node, as the Cordon step makes it: owner and in-progress annotations, cordon."""
    cluster = KubeCluster(lambda: api.api_client)
    node = cluster.get_node(slot.node)
    assert node is not None
    in_progress = {
        "instance": slot.instance_id,
        "transition": Transition.TERMINATING.short,
        "token": slot.token,
        "started": "2025-03-01T12:00:00+00:00",
        "cordon": True,
        "lb": False,
    }
    claimed = cluster.claim_node(
        node,
        owner=slot.owner,
        in_progress=json.dumps(in_progress, separators=(",", ":")),
        cordon=True,
        exclude_from_lb=False,
    )
    assert claimed is Claim.CLAIMED


def recreate_the_configmap(server: KubeServer) -> None:
    admin = admin_api(server)
    admin.delete_namespaced_config_map("nodecycle-budget", NAMESPACE)
    server.apply(RBAC)  # shipped without data, as GitOps or an operator brings it back
    assert admin.read_namespaced_config_map("nodecycle-budget", NAMESPACE).data is None


def test_drains_in_progress_keep_their_slots_when_the_configmap_is_recreated_empty(
    server: KubeServer,
) -> None:
    # Given 6 nodes, a budget of 2, and two drains in progress (slot held, node claimed)
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock()
    blue = budget_of(api, clock, "blue")
    for i in (0, 1):
        assert blue.acquire(request(i)).granted
        cordon(api, request(i))

    # When the ConfigMap is deleted and re-created empty mid-refresh
    recreate_the_configmap(server)
    clock.advance(5)

    # Then a third node still waits: the drains in progress are counted from their nodes
    third = blue.acquire(request(2))
    assert (third.granted, third.reason) == (False, SlotReason.NO_ROOM)
    assert third.holders == 2
    # and the drains in progress keep their slots at their renewals, under their own lifecycles
    for i in (0, 1):
        renewed = blue.renew(request(i))
        assert (renewed.granted, renewed.reason) == (True, SlotReason.HELD)
    held = {h.node: h for h in blue.snapshot().holders}
    assert set(held) == {node_name(0), node_name(1)}
    assert held[node_name(0)].record_id == request(0).record_id
    api.api_client.close()


def test_another_stacks_drain_in_progress_is_counted_in_its_zone_by_the_first_stack_that_writes(
    server: KubeServer,
) -> None:
    # Given 9 nodes over three zones; blue allows 50% (5) in all and 1 per zone, green 2 in all; green drains
    # node 0 (zone a), blue node 1 (zone b)
    add_nodes(server, 9)
    api = core_api(server)
    clock = FakeClock()
    blue = budget_of(api, clock, "blue", total="50%", per_zone="1")
    green = budget_of(api, clock, "green")
    assert green.acquire(request(0, "green")).granted
    cordon(api, request(0, "green"))
    assert blue.acquire(request(1)).granted
    cordon(api, request(1))

    # When the ConfigMap is re-created empty, and blue writes first
    recreate_the_configmap(server)
    clock.advance(5)

    # Then blue's nodes of zones a and b wait behind the drains in progress there, green's among them, and one
    # of zone c goes
    assert blue.acquire(request(3)).reason is SlotReason.NO_ROOM  # zone a
    assert blue.acquire(request(4)).reason is SlotReason.NO_ROOM  # zone b
    assert blue.acquire(request(5)).granted  # zone c
    # and green's drain, at its next poll, is judged under green's limits: beside blue's two holders green's view
    # is full, and its node does not tell whether it held its slot or had lost it and paused, so it waits in line,
    # in progress (the safe side: see Holder.seeded)...
    polled_green = replace(request(0, "green"), in_progress=True)
    assert green.renew(polled_green).reason is SlotReason.LOST
    held = {h.node: h.owner for h in blue.snapshot().holders}
    assert held == {node_name(1): "blue", node_name(5): "blue"}
    # ...and drains again, under its own lifecycle and owner, once green's view has room
    blue.release(node_name(5), request(5).record_id, request(5).token)
    assert green.renew(polled_green).granted
    held = {h.node: h.owner for h in blue.snapshot().holders}
    assert held == {node_name(0): "green", node_name(1): "blue"}
    api.api_client.close()


def polled(i: int) -> SlotRequest:
    """The slot request of a drain's poll (the EVICT step's renewal): disruption in progress."""
    return replace(request(i), in_progress=True)


def test_a_drain_that_lost_its_slot_does_not_resume_beside_the_one_holding_it_when_the_configmap_is_recreated(
    server: KubeServer,
) -> None:
    # Given a budget of 1: node 1's drain lost its slot (its holder expired, a stalled function) to node 0's, which
    # drains; node 1 is cordoned and paused, in line with precedence
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock()
    blue = budget_of(api, clock, "blue", total="1", per_zone="1")
    assert blue.acquire(request(1)).granted
    cordon(api, request(1))
    clock.advance(TTL.total_seconds() + 1)
    assert blue.acquire(request(0)).granted
    cordon(api, request(0))
    assert blue.renew(polled(1)).reason is SlotReason.LOST

    # When the ConfigMap is deleted and re-created empty ("resetting" the budget), and both drains poll again
    recreate_the_configmap(server)
    clock.advance(5)
    decisions = [blue.renew(polled(i)) for i in (0, 1)]

    # Then only one of them drains: the nodes show two drains in progress, not which of them held the slot
    assert [d.granted for d in decisions].count(True) == 1
    held = blue.snapshot().holders
    assert len(held) == 1
    # and the other waits in line, in progress, and goes next
    assert blue.renew(polled(0) if decisions[1].granted else polled(1)).reason is SlotReason.LOST
    api.api_client.close()


def test_a_drain_granted_but_not_cordoned_when_the_seed_lists_the_nodes_finds_its_slot_gone_at_its_first_poll(
    server: KubeServer,
) -> None:
    # Given a budget of 1, and node 0's drain granted its slot, its cordon not made yet (its next step queued)
    add_nodes(server, 6)
    api = core_api(server)
    clock = FakeClock()
    blue = budget_of(api, clock, "blue", total="1", per_zone="1")
    assert blue.acquire(request(0)).granted

    # When the ConfigMap is re-created empty, and node 1 asks first: its seed finds no drain in progress
    recreate_the_configmap(server)
    clock.advance(5)
    assert blue.acquire(request(1)).granted
    cordon(api, request(1))

    # Then node 0's drain, cordoned now, finds its slot gone at its first poll, which comes before any of its
    # evictions (the EVICT step renews the slot first): it waits in line, in progress, behind node 1
    cordon(api, request(0))
    lost = blue.renew(polled(0))
    assert (lost.granted, lost.reason, lost.holders) == (False, SlotReason.LOST, 1)
    assert [h.node for h in blue.snapshot().holders] == [node_name(1)]
    api.api_client.close()


def test_a_sweep_while_the_configmap_is_deleted_fails_naming_it(server: KubeServer) -> None:
    add_nodes(server, 3)
    api = core_api(server)
    blue = budget_of(api, FakeClock(), "blue")
    assert blue.acquire(request(0)).granted
    admin_api(server).delete_namespaced_config_map("nodecycle-budget", NAMESPACE)

    with pytest.raises(BudgetNotInstalled, match="nodecycle/nodecycle-budget does not exist"):
        blue.sweep(stale=lambda entries: Verdict())
    api.api_client.close()
