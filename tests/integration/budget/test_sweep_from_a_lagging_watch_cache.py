"""The budget's sweep judges a slot's node gone by the sweeper's list of the nodes' metadata, which it asks for with
resourceVersion=0 (see nodecycle.adapters.kube.lists): kube-apiserver answers it from its watch cache, which may lag
behind etcd (by milliseconds, or seconds under load or while its watch re-lists; "any version will do", the API
concepts' resourceVersion semantics). A node registered moments before its instance's drain took a slot (a Spot
interruption, a scale-in right after a scale-out) may be missing from that list: judged gone, its slot was freed
while its drain evicted, and the next node granted it (invariant 1). Judged by the record's index, the sweep reads
each lifecycle again, consistently, before it removes anything (shared_owner.lifecycle_over): its nodes, likewise. The
sandbox's lagging_watch_cache holds the nodes' cache at its state before the node registered."""

from __future__ import annotations

from collections.abc import Collection
from datetime import timedelta

import pytest
from kubernetes import client

from nodecycle.adapters.kube.cluster_api import NODES_READ_ONE_BY_ONE, KubeCluster
from nodecycle.domain.budget import DisruptionBudget
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.nodes import SweepNodes
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry
from tests.integration.budget.conftest import add_nodes, admin_api, instance_of, node_name, zone_of
from tests.integration.budget.test_configmap_recreated import budget_of, cordon, request
from tests.support.fakes import FakeClock as RecordsClock
from tests.support.fakes import FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.budget.fakes import FakeClock
from tests.unit.foundation.test_engine import PLAN, make_record

SWEEPER_KEY = "AKIATESTSWEEPROLE000"
SWEEPER_ROLE = "arn:aws:iam::123456789012:role/nodecycle-SweeperFunctionRole"


def alive(instances: Collection[str]) -> set[str]:
    return set(instances)  # (EC2 says every instance of the entries runs)


def sweep_budget(
    server: KubeServer,
    budget: DisruptionBudget,
    records: InMemoryRecords,
    open_records: list[LifecycleRecord],
    clock: FakeClock,
) -> dict[str, int]:
    """What the sweeper's budget part does with ``open_records`` open, built as the sweeper's wiring builds it (its
    nodes read as the sweeper's role)."""
    nodes = SweepNodes(KubeCluster(lambda: server.api_client(SWEEPER_KEY)))
    part = StaleBudgetEntries(
        budget=budget,
        records=records,
        node_names=nodes.node_names,
        nodes_now=nodes.nodes_now,
        alive_instances=alive,
        waker=Dispatcher(
            records=records, queues=RecordingQueues(), clock=RecordsClock(), metrics=FakeMetrics()
        ),
    )
    return part(open_records, clock.now(), SweepTime(lambda: 300.0, timedelta(seconds=45)))


def test_a_slot_whose_node_the_watch_cache_does_not_show_yet_is_not_swept(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 1, two nodes, and the nodes' watch cache lagging behind etcd from before a third registers
    server.add_access_entries([AccessEntry(SWEEPER_ROLE, ("nodecycle-sweeper",))])
    server.map_role(SWEEPER_KEY, SWEEPER_ROLE, "nodecycle-SweeperFunction")
    add_nodes(server, 2)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue", total="1", per_zone="1")
    records = InMemoryRecords()
    slot = request(2)
    drain = make_record(
        PLAN, Step.EVICT, id=slot.record_id, instance_id=slot.instance_id, token=slot.token, owner="blue"
    )
    records.create(drain)
    with server.lagging_watch_cache("nodes"):
        # ...and the third node's instance drained moments after its registration: its slot granted, node cordoned
        server.add_node(node_name(2), instance_id=instance_of(2), zone=zone_of(2))
        server.settle()
        assert blue.acquire(slot).granted
        cordon(core, slot)

        # When the sweeper sweeps the budget, its lifecycle open
        counts = sweep_budget(server, blue, records, [drain], clock)

    # Then the draining node keeps its slot, and the next node waits for it
    assert counts == {"SweptHolders": 0, "SweptWaiters": 0}
    assert [h.node for h in blue.snapshot().holders] == [node_name(2)]
    assert not blue.acquire(request(0)).granted


@pytest.mark.parametrize("gone", [2, 6], ids=["read-one-by-one", "listed-at-once"])
def test_the_slots_of_nodes_that_are_gone_are_swept_all_the_same(
    server: KubeServer, core: client.CoreV1Api, gone: int
) -> None:
    # Given slots on nodes that were deleted since, their lifecycles over (their releases lost) though the sweep's
    # snapshot of the open ones (an index that lags) still has them
    server.add_access_entries([AccessEntry(SWEEPER_ROLE, ("nodecycle-sweeper",))])
    server.map_role(SWEEPER_KEY, SWEEPER_ROLE, "nodecycle-SweeperFunction")
    add_nodes(server, gone + 1)
    clock = FakeClock()
    blue = budget_of(core, clock, "blue", total="10", per_zone="10")
    records = InMemoryRecords()
    drains = []
    for i in range(gone):
        assert blue.acquire(request(i)).granted
        slot = request(i)
        drains.append(
            make_record(
                PLAN,
                Step.EVICT,
                id=slot.record_id,
                instance_id=slot.instance_id,
                token=slot.token,
                owner="blue",
            )
        )
        records.create(drains[-1].model_copy(update={"step": Step.DONE}))
        admin_api(server).delete_node(node_name(i))
    server.reset_counters()

    # When the sweeper sweeps the budget
    counts = sweep_budget(server, blue, records, drains, clock)

    # Then their slots are swept (their records read again, their nodes missing), the nodes missing from the list
    # read again one by one, or, more than a few, in one more list
    assert counts == {"SweptHolders": gone, "SweptWaiters": 0}
    assert blue.snapshot().holders == []
    assert server.counters()[("list", "nodes")] == 1 + (gone if gone <= NODES_READ_ONE_BY_ONE else 1)
