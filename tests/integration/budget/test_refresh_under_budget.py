"""An instance refresh replacing every node at once, each drain taking its slot through the budget as the
drain function does: acquire before cordon, renew while evicting, release once the action is complete
(the instance is gone), wake the waiters the release names. The bound is checked on the API server's own
write history, not on what the drains say."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from nodecycle.domain.budget import SlotRequest
from nodecycle_sandbox.kube import KubeServer, max_unschedulable
from tests.integration.budget.conftest import ZONES, add_nodes, instance_of, node_name, zone_of
from tests.integration.budget.drains import Drain, SharedMetrics

NODES = 12  # 4 per zone
DRAIN_SECONDS = 0.6
RETRY_SECONDS = 5.0  # the backoff of a waiter nobody wakes: far longer than a wake-up may take


def test_a_refresh_of_every_node_never_cordons_more_than_the_budget_allows(server: KubeServer) -> None:
    # Given 12 nodes over 3 zones and a budget of 4 in all and 2 per zone
    add_nodes(server, NODES)
    metrics = SharedMetrics()
    drains = [Drain.connect(server, metrics, total="4", per_zone="2") for _ in range(NODES)]
    wake = {f"rec-{i}": threading.Event() for i in range(NODES)}
    woken: list[str] = []  # waiters that got their slot once a release woke them
    backed_off: list[str] = []  # waiters whose backoff ran out with no release waking them
    start = threading.Barrier(NODES)

    def drain(i: int) -> None:
        me, record = drains[i], f"rec-{i}"
        request = SlotRequest(
            node=node_name(i), instance_id=instance_of(i), zone=zone_of(i), owner="blue", record_id=record
        )
        start.wait()
        waited = False
        while not me.acquire(request).granted:
            if not wake[record].wait(RETRY_SECONDS):
                backed_off.append(record)
            wake[record].clear()
            waited = True
        if waited:
            woken.append(record)
        me.api.patch_node(request.node, {"spec": {"unschedulable": True}})  # cordon
        for _ in range(3):  # evict, wait, renew at every step
            time.sleep(DRAIN_SECONDS / 3)
            assert me.budget.renew(request).granted
        server.remove_node(request.node)  # CompleteLifecycleAction CONTINUE: the instance terminates
        for waiter in me.budget.release(request.node, request.record_id):
            wake[waiter].set()

    # When every node is drained at once
    with ThreadPoolExecutor(NODES) as pool:
        for done in [pool.submit(drain, i) for i in range(NODES)]:
            done.result()

    # Then the API server never had more than 4 nodes cordoned, nor more than 2 of one zone, and the budget
    # was used to the full; every freed slot went to a woken waiter, none waited out its backoff (not timed:
    # a bound of one second from the wake-up to the slot failed when the woken thread ran a second late)
    history = server.history()
    assert max_unschedulable(history) == 4
    assert max(max_unschedulable(history, zone=zone) for zone in ZONES) == 2
    assert server.objects("nodes") == []
    assert woken, "no waiter was woken by a release"
    assert backed_off == [], f"waiters nobody woke within {RETRY_SECONDS}s: {backed_off}"
    for each in drains:
        each.close()
