"""Writes of the budget that the API server applied and whose answers the connection lost (kube-lost-response:
served, then the connection closed before the response), through the product's client (its retries: urllib3
does not send such a write again) and ConfigMapBudgetStore.

A write that passes slots on to waiters (a release, an ask whose write removes an expired holder) must wake
them: they hold their slots from that write on, and a lifecycle not woken leaves its slot idle until its own
retry (makespan). The outcome of a write whose answer is lost is unknown to the writer; read back, the
document tells whether it landed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import cast

import pytest
from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle.adapters.kube.eks_access import CLIENT_RETRIES
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotReason, SlotRequest
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_KEY, NAMESPACE, add_nodes, instance_of, node_name, zone_of
from tests.integration.budget.drains import SharedMetrics
from tests.unit.budget.fakes import FakeClock

TTL = timedelta(seconds=300)


@pytest.fixture(params=["CoreV1Api", "CoreV1"])
def api(server: KubeServer, request: pytest.FixtureRequest) -> Iterator[client.CoreV1Api]:
    """The drain function's client with the product's retries (a write whose answer is lost is not sent again):
    the official CoreV1Api, and the product's CoreV1 (the same calls without it)."""
    config = server.api_client(DRAIN_KEY).configuration
    config.retries = CLIENT_RETRIES
    official = client.CoreV1Api(client.ApiClient(config))
    yield official if request.param == "CoreV1Api" else cast("client.CoreV1Api", CoreV1(official.api_client))
    official.api_client.close()


def request(i: int) -> SlotRequest:
    return SlotRequest(
        node=node_name(i), instance_id=instance_of(i), zone=zone_of(i), owner="blue", record_id=f"rec-{i}"
    )


def budget_of(api: client.CoreV1Api, clock: FakeClock) -> DisruptionBudget:
    return DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: api, NAMESPACE, sleep=lambda _: None),
        nodes=KubeNodeInventory(lambda: api, with_status=False),
        clock=clock,
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse("2"), Quantity.parse("2")),
        holder_ttl=TTL,
        count_unavailable=False,
        owner="blue",
    )


def lose_the_next_answer(server: KubeServer) -> None:
    server.faults.arm([Fault("lost", "kube-lost-response", target="PUT configmaps", limit=1)], seed=1)


def test_a_release_whose_answer_is_lost_wakes_the_waiter_it_passed_its_slot_to(
    server: KubeServer, api: client.CoreV1Api
) -> None:
    # Given a budget of 2, held by nodes 0 and 1, and node 2 waiting
    add_nodes(server, 6)
    blue = budget_of(api, FakeClock())
    assert blue.acquire(request(0)).granted
    assert blue.acquire(request(1)).granted
    assert blue.acquire(request(2)).reason is SlotReason.NO_ROOM

    # When node 0's slot is given back, and the API server applies the write but its answer is lost
    lose_the_next_answer(server)
    woken = blue.release(node_name(0), "rec-0")

    # Then the write landed once, passing the slot on to node 2, whose lifecycle is woken by this release
    assert [f.kind for f in server.faults.firings()] == ["kube-lost-response"]
    assert {h.node for h in blue.snapshot().holders} == {node_name(1), node_name(2)}
    assert woken == ["rec-2"]


def test_an_ask_whose_answer_is_lost_wakes_the_waiter_its_write_passed_an_expired_slot_to(
    server: KubeServer, api: client.CoreV1Api
) -> None:
    # Given a budget of 2 held by nodes 0 and 1, node 2 waiting, and node 0's drain gone silent: its holder
    # expires while node 1 and node 2 keep asking
    add_nodes(server, 6)
    clock = FakeClock()
    blue = budget_of(api, clock)
    assert blue.acquire(request(0)).granted
    assert blue.acquire(request(1)).granted
    assert blue.acquire(request(2)).reason is SlotReason.NO_ROOM
    clock.advance(TTL.total_seconds() / 2)
    assert blue.renew(request(1)).granted
    assert blue.acquire(request(2)).reason is SlotReason.NO_ROOM
    clock.advance(TTL.total_seconds() / 2 + 1)

    # When node 3 asks, its write removing node 0's expired holder, and the write's answer is lost
    lose_the_next_answer(server)
    third = blue.acquire(request(3))

    # Then the write landed once, node 2 holds the slot it passed on, and the decision wakes node 2's lifecycle
    assert [f.kind for f in server.faults.firings()] == ["kube-lost-response"]
    assert {h.node for h in blue.snapshot().holders} == {node_name(1), node_name(2)}
    assert (third.granted, third.wake) == (False, ("rec-2",))
