"""Seeded random interleavings of two stacks' drains on the sandbox's API server, through the product's own
adapters (ConfigMapBudgetStore with the product's client retries, KubeNodeInventory), under a storm of 409s
and writes whose answers are lost (the write landed, the function was told of a transient error and its step
is delivered again): asks, renewals, releases, nodes cordoned by hand, nodes gone with their instances, time
passing past the holders' TTL.

Checked after every step, on the ConfigMap as the API server holds it (invariant 1): no node is held twice;
each slot a write granted (or passed on to a waiter) keeps the granting stack within its limits as it
resolves them from the nodes the API server lists: every stack's live holders, and the nodes it counts as
unavailable (cordoned or NotReady, not held, not given back by their drain)."""

from __future__ import annotations

import random
from datetime import timedelta

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.adapters.kube.eks_access import CLIENT_RETRIES
from nodecycle.domain.budget import BudgetDocument, BudgetLimits, DisruptionBudget, SlotRequest, rules
from nodecycle.domain.errors import TransientError
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import (
    DRAIN_KEY,
    NAMESPACE,
    add_nodes,
    admin_api,
    instance_of,
    node_name,
    zone_of,
)
from tests.integration.budget.drains import SharedMetrics
from tests.unit.budget.fakes import FakeClock

NODES = 9  # 3 per zone
STEPS = 300
# blue: a percent of 9 (4) in all, 1 per zone, counting unavailable nodes; green: 2 in all, 2 per zone
LIMITS = {"blue": ("40%", "1", True), "green": ("2", "2", False)}
TTL = timedelta(seconds=60)


def product_api(server: KubeServer) -> client.CoreV1Api:
    """The drain function's client, with the product's retries: a write whose answer is lost is not sent
    again by urllib3 (it would meet its own write's 409), but told as a transient error."""
    config = server.api_client(DRAIN_KEY).configuration
    config.retries = CLIENT_RETRIES
    return client.CoreV1Api(client.ApiClient(config))


@pytest.mark.parametrize("seed", [3, 11])
def test_two_stacks_under_a_conflict_storm_and_lost_answers_never_grant_past_their_limits(
    server: KubeServer, seed: int
) -> None:
    add_nodes(server, NODES)
    admin = admin_api(server)
    api = product_api(server)
    clock = FakeClock()
    # (listed afresh at every write: what the check reads is what the stack's write read)
    inventory = KubeNodeInventory(lambda: api, max_age=timedelta(0))
    budgets = {
        owner: DisruptionBudget(
            store=ConfigMapBudgetStore(lambda: api, NAMESPACE, sleep=lambda _: None),
            nodes=inventory,
            clock=clock,
            metrics=SharedMetrics(),
            limits=BudgetLimits(Quantity.parse(total), Quantity.parse(per_zone)),
            holder_ttl=TTL,
            count_unavailable=counting,
            owner=owner,
        )
        for owner, (total, per_zone, counting) in LIMITS.items()
    }
    owner_of = {i: ("blue", "green")[i % 2] for i in range(NODES)}
    lifecycle = dict.fromkeys(range(NODES), 0)
    gone: set[int] = set()
    dice = random.Random(seed)
    store = ConfigMapBudgetStore(lambda: admin, NAMESPACE)

    def request(i: int) -> SlotRequest:
        return SlotRequest(
            node=node_name(i),
            instance_id=instance_of(i),
            zone=zone_of(i),
            owner=owner_of[i],
            record_id=f"rec-{i}-{lifecycle[i]}",
        )

    def stored() -> BudgetDocument:
        return rules.prune(store.read() or BudgetDocument(), clock.now())

    def counted(owner: str, doc: BudgetDocument) -> dict[str, str | None]:
        taken = {h.node: h.zone for h in doc.holders}
        if LIMITS[owner][2]:
            skip = set(taken) | rules.leaving(doc)
            for state in inventory.nodes_in_scope():
                if state.unavailable and state.name not in skip:
                    taken[state.name] = state.zone
        return taken

    def check(owner: str, before: BudgetDocument, already: dict[str, str | None]) -> int:
        doc = stored()
        nodes = [h.node for h in doc.holders]
        assert len(nodes) == len(set(nodes)), nodes
        old = {(h.node, h.record_id) for h in before.holders}
        new = [h for h in doc.holders if (h.node, h.record_id) not in old]
        assert all(h.owner == owner for h in new), new
        if not [h for h in new if h.node not in already]:
            return 0
        limits = BudgetLimits(Quantity.parse(LIMITS[owner][0]), Quantity.parse(LIMITS[owner][1]))
        resolved = limits.resolve(inventory.nodes_in_scope(), rules.leaving(doc))
        taken = counted(owner, doc)
        assert len(taken) <= resolved.total, (owner, taken, resolved)
        assert resolved.per_zone is not None
        for zone in {z for z in taken.values() if z is not None}:
            load = sum(1 for z in taken.values() if z in (None, zone))
            assert load <= resolved.per_zone.of(zone), (owner, zone, taken, resolved)
        return len(new)

    server.faults.arm(
        [
            Fault("storm", "kube-conflict", target="PUT configmaps", probability=0.4),
            Fault("lost", "kube-lost-response", target="PUT configmaps", probability=0.15),
        ],
        seed=seed,
    )
    granted = lost = 0
    for _ in range(STEPS):
        i = dice.randrange(NODES)
        owner = owner_of[i]
        move = dice.choice(["ask", "ask", "ask", "release", "time", "cordon", "uncordon", "gone"])
        if move == "time":
            clock.advance(dice.choice([5, 20, 45, 70]))
            continue
        if move in ("cordon", "uncordon") and i not in gone:
            admin.patch_node(node_name(i), {"spec": {"unschedulable": move == "cordon"}})
            continue
        if move == "gone" and i not in gone and dice.random() < 0.3:
            server.remove_node(node_name(i))  # its instance terminated: the node object goes
            gone.add(i)
            continue
        if i in gone:
            continue
        before = stored()
        already = counted(owner, before)
        try:
            if move == "ask":
                budgets[owner].acquire(request(i))
            else:
                budgets[owner].release(node_name(i), request(i).record_id)
                lifecycle[i] += 1
        except TransientError:
            lost += 1  # a lost answer or a storm that did not let up: the step is delivered again later
        granted += check(owner, before, already)
    server.faults.disarm()

    firings = {f.kind for f in server.faults.firings()}
    print(f"\nseed {seed}: {STEPS} steps, {granted} slots granted, {lost} transient errors, faults {firings}")
    assert granted > 0, "the run granted no slot"
    # (a lost answer whose write landed is read back and returns as written: no transient error to count)
    assert "kube-lost-response" in firings, "no write lost its answer"
    api.api_client.close()
    admin.api_client.close()
