"""Two stacks sharing the budget with different limits: green allows 2 nodes out at once, blue 3. Each evaluates
its own limits against the holders of both (README: the disruption budget), so blue may fill the cluster to 3,
past green's 2, and green's nodes then wait for blue's holders to drain down under green's limit. That is the
rule (a stack's limit bounds what it sees when it grants, never another stack's grants), but blue's refresh must
not keep green's waiter out for good: each of blue's drains ends and hands its slot to blue's next node, so the
cluster stays at 3 and green never sees room, until its action's global timeout makes it urgent -- hours of a
refresh later, its node drained at the last moment or forced past every budget. A waiter kept out by another
stack's holders counts a pass each time a younger waiter of another stack takes a slot, and once passed over
``MAX_PASSED`` times the replay keeps its room as it does for a drain in progress: blue's newcomers wait while
blue's holders drain down, and green's node goes. On the sandbox API server, through the product's adapters."""

from __future__ import annotations

from collections import deque
from datetime import timedelta

from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.budget.rules import MAX_PASSED
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, core_api, instance_of, node_name, zone_of
from tests.integration.budget.drains import SharedMetrics, WallClock

NODES = 40


def stack(api: client.CoreV1Api, owner: str, total: str) -> DisruptionBudget:
    return DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: api, NAMESPACE),
        nodes=KubeNodeInventory(lambda: api),
        clock=WallClock(),
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse(total), None),
        holder_ttl=timedelta(seconds=600),
        count_unavailable=False,
        owner=owner,
    )


def ask(index: int, owner: str) -> SlotRequest:
    return SlotRequest(
        node=node_name(index),
        instance_id=instance_of(index),
        zone=zone_of(index),
        owner=owner,
        record_id=f"rec-{index}",
    )


def test_a_looser_stacks_refresh_does_not_keep_a_stricter_stacks_older_waiter_out_until_its_deadline(
    server: KubeServer,
) -> None:
    # Given green allowing 2 and blue 3 on one cluster, blue holding 2 nodes of its refresh, and green's node
    # asking then: its view is full (2 of 2)
    add_nodes(server, NODES)
    api = core_api(server)
    green, blue = stack(api, "green", "2"), stack(api, "blue", "3")
    held: deque[int] = deque()
    for i in (1, 2):
        assert blue.acquire(ask(i, "blue")).granted
        held.append(i)
    green_node = ask(0, "green")
    assert not green.acquire(green_node).granted

    # When blue's refresh goes on, a drain at a time ending (its slot given back) while its next node asks, and
    # green's node asks again at each round
    store = ConfigMapBudgetStore(lambda: api, NAMESPACE)
    rounds, most = 0, 0
    newcomer = 3
    waiting: deque[int] = deque()
    granted = False
    while not granted and newcomer < NODES:
        rounds += 1
        waiting.append(newcomer)
        newcomer += 1
        for index in list(waiting):
            if blue.acquire(ask(index, "blue")).granted:
                waiting.remove(index)
                held.append(index)
        granted = green.acquire(green_node).granted
        doc = store.read()
        assert doc is not None
        most = max(most, len(doc.holders))
        if granted:
            # (green's own limit held when it granted: its node beside one of blue's at most)
            assert len(doc.holders) <= 2, doc.holders
        if held:
            oldest = held.popleft()
            blue.release(node_name(oldest), f"rec-{oldest}")

    # Then green's node takes a slot within a few of blue's grants: once passed over MAX_PASSED times, blue's
    # newcomers wait until blue's holders are under green's limit. Blue never exceeds its own 3.
    assert granted, f"green's node still waits after {rounds} rounds of blue's refresh"
    assert rounds <= MAX_PASSED + 3, rounds
    assert most <= 3
    api.api_client.close()
