"""Many drains asking for a slot at the same instant, each through its own connection to the API server."""

from __future__ import annotations

import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore
from nodecycle.domain.budget import SlotDecision, SlotRequest
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, core_api, instance_of, node_name, zone_of
from tests.integration.budget.drains import Drain, SharedMetrics

ACQUIRERS = 50


def test_fifty_concurrent_acquirers_over_three_zones_end_with_exactly_the_allowed_holders(
    server: KubeServer,
) -> None:
    # Given 50 nodes over 3 zones, and 50 drains with limits 4 in all and 2 per zone, each its own client
    add_nodes(server, ACQUIRERS)
    metrics = SharedMetrics()
    drains = [Drain.connect(server, metrics, total="4", per_zone="2") for _ in range(ACQUIRERS)]
    start = threading.Barrier(ACQUIRERS)

    def acquire(i: int) -> SlotDecision:
        request = SlotRequest(
            node=node_name(i), instance_id=instance_of(i), zone=zone_of(i), owner="blue", record_id=f"rec-{i}"
        )
        start.wait()
        return drains[i].acquire(request)

    # When they all acquire at once
    began = time.monotonic()
    with ThreadPoolExecutor(ACQUIRERS) as pool:
        decisions = list(pool.map(acquire, range(ACQUIRERS)))
    elapsed = time.monotonic() - began

    # Then exactly 4 hold a slot, at most 2 per zone, and the 46 others wait, each node once, in arrival order
    doc = ConfigMapBudgetStore(lambda: core_api(server), NAMESPACE).read()
    assert doc is not None
    assert sum(d.granted for d in decisions) == 4
    assert len(doc.holders) == 4
    assert max(Counter(h.zone for h in doc.holders).values()) <= 2
    assert len(doc.waiters) == ACQUIRERS - 4
    assert sorted(e.node for e in doc.entries()) == sorted(node_name(i) for i in range(ACQUIRERS))
    assert [w.waiting_since for w in doc.waiters] == sorted(w.waiting_since for w in doc.waiters)

    calls = server.counters()
    conflicts = int(metrics.totals.get("BudgetConflicts", 0))
    transient = sum(d.transient_retries for d in drains)
    print(
        f"\ncontention: {ACQUIRERS} acquirers, limits 4 / 2 per zone, {elapsed:.2f}s; "
        f"{conflicts} conflicts (409) re-read and retried, {transient} acquires retried after "
        f"TransientError (8 attempts exhausted); ConfigMap API calls: get {calls.get(('get', 'configmaps'), 0)}, "
        f"create {calls.get(('create', 'configmaps'), 0)}, update {calls.get(('update', 'configmaps'), 0)}; "
        f"node lists {calls.get(('list', 'nodes'), 0)}"
    )
    assert conflicts > 0, "the acquirers did not actually race"
    for drain in drains:
        drain.close()
