"""Duplicate deliveries of drains' first asks racing one another, each in its own container (its own client of the
sandbox API server, its own clock, one of them seconds ahead), through the product's AcquireSlot step.

A duplicate of an ask that took its slot finds it held by its own lifecycle (``held``) and goes on as the first
did; one of them commits, the other's commit loses. No delivery, first or duplicate, takes a second slot, nor one
past the limits (invariant 1), whichever container's write lands first, and whatever its clock says."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import timedelta

from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, core_api, node_name
from tests.integration.budget.recreation import record_of
from tests.integration.budget.test_configmap_recreated import budget_of, request
from tests.integration.budget.test_late_deliveries_after_recreation import late_ask
from tests.support.fakes import InMemoryRecords
from tests.unit.budget.fakes import START, FakeClock

# the containers' clocks: one of them runs seconds ahead
SKEWS = (timedelta(0), timedelta(seconds=7), timedelta(0), timedelta(seconds=-3))


def test_duplicate_first_asks_of_two_drains_in_skewed_containers_take_one_slot_each_within_the_limit(
    server: KubeServer,
) -> None:
    # Given a budget of 1, and two deliveries each of node 0's and node 1's first asks, in four containers
    add_nodes(server, 6)
    records = InMemoryRecords()
    slots = [replace(request(i), since=START - timedelta(minutes=1)) for i in (0, 1)]
    for slot in slots:
        records.create(record_of(slot, Step.ACQUIRE_SLOT, seq=1))
    apis = [core_api(server) for _ in SKEWS]
    budgets = [
        budget_of(api, FakeClock(START + skew), "blue", total="1", per_zone="1")
        for api, skew in zip(apis, SKEWS, strict=True)
    ]
    asks = [(apis[k], budgets[k], slots[k % 2]) for k in range(len(SKEWS))]
    start = threading.Barrier(len(asks))

    def ask(k: int) -> Outcome:
        api, budget, slot = asks[k]
        start.wait()
        return late_ask(api, budget, records, slot)

    # When they all run at once
    with ThreadPoolExecutor(len(asks)) as pool:
        outcomes = list(pool.map(ask, range(len(asks))))

    # Then one node holds the one slot, under its own lifecycle: both of its deliveries go on (one of them will
    # commit), both of the other's wait in line
    holders = budgets[0].snapshot().holders
    assert len(holders) == 1
    winner = next(i for i in (0, 1) if holders[0].node == node_name(i))
    assert holders[0].record_id == slots[winner].record_id
    went_on = [k % 2 for k, outcome in enumerate(outcomes) if not outcome.again]
    assert went_on == [winner, winner]
    assert [w.node for w in budgets[0].snapshot().waiters] == [node_name(1 - winner)]
    for api in apis:
        api.api_client.close()
