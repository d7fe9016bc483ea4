"""A node its drain's cleanup kept cordoned and marked released (``nodecycle.io/released-for``), under
BudgetCountUnavailable, once the budget's own mark of its slot given back has expired (a holder TTL after it).

The mark on the node says what the budget's mark says (see ``NodeState.released``): its drain ended and gave its
slot back, its instance out of service. Both take the node out of a percent's nodes; the budget's mark also excuses
it from the unavailable nodes counted, "so a node out of the total never takes a slot". The node's did not: a
holder TTL after the release, the node, out of the total, counted as unavailable again, for as long as it stayed
listed. A node whose instance terminates is deleted within a minute, but the cleanup keeps the cordon, and the
mark, for as long as the instance waits in a Running warm pool (until a scale-out takes it back: hours, days), or
its scheduled maintenance is ahead: each such node took one of every counting stack's slots meanwhile, the refresh
behind them waiting for slots that never came free until each drain's global timeout forced it (invariants 1, 9).
A Stopped pool's node, whose shutdown taint tells it, was already neither counted nor in scope. Through the Cleanup
step and the budget's adapters on the sandbox API server."""

from __future__ import annotations

from datetime import timedelta

from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeDrainsInProgress, KubeNodeInventory
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget
from nodecycle.domain.model import WARM_POOL, Step
from nodecycle.domain.policy import Quantity
from nodecycle.domain.ports.cluster import RELEASED_FOR_ANNOTATION
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, add_nodes, node_name
from tests.integration.budget.drains import SharedMetrics
from tests.integration.budget.recreation import lifecycle_of, slot_of
from tests.integration.budget.test_configmap_recreated import TTL, cordon
from tests.support.fakes import FakeAutoscaling
from tests.unit.budget.fakes import FakeClock
from tests.unit.drain.test_drain_steps import cleanup


def counting_budget(api: client.CoreV1Api, clock: FakeClock, total: str) -> DisruptionBudget:
    """Stack blue's budget as the drain function wires it under BudgetCountUnavailable: whole nodes listed (listed
    afresh at each ask, as a container's cache is after its max age)."""
    return DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: api, NAMESPACE, sleep=lambda _: None),
        nodes=KubeNodeInventory(lambda: api, max_age=timedelta(0)),
        clock=clock,
        metrics=SharedMetrics(),
        limits=BudgetLimits(Quantity.parse(total), Quantity.parse(total)),
        holder_ttl=TTL,
        count_unavailable=True,
        owner="blue",
        drains=KubeDrainsInProgress(lambda: api),
    )


def test_a_node_kept_cordoned_in_a_running_warm_pool_takes_no_slot_once_the_budget_s_mark_has_expired(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given 6 nodes, a budget of 1 counting unavailable nodes, and node 0 drained by a scale-in back into a Running
    # warm pool: its cleanup gave the slot back and kept the node cordoned, marked released for its lifecycle
    add_nodes(server, 6)
    clock = FakeClock()
    blue = counting_budget(core, clock, "1")
    slot = slot_of(0)
    assert blue.acquire(slot).granted
    cordon(core, slot)
    into_pool = lifecycle_of(slot, Step.CLEANUP, seq=5).model_copy(update={"destination": WARM_POOL})
    pool = FakeAutoscaling(states={slot.instance_id: "Warmed:Running"})
    ended = cleanup(KubeCluster(lambda: core.api_client), blue, pool)(into_pool, clock.now())  # type: ignore[arg-type]
    assert ended.again  # (watching the pooled node, which stays cordoned until a scale-out takes it back)
    found = server.get_object("nodes", node_name(0))
    assert found is not None
    assert (found["metadata"].get("annotations") or {}).get(RELEASED_FOR_ANNOTATION) == slot.record_id
    assert found["spec"].get("unschedulable") is True
    # (within a TTL of the release the budget's own mark excuses it: node 1 drains and gives its slot back)
    assert blue.acquire(slot_of(1)).granted
    blue.release(slot_of(1).node, slot_of(1).record_id, slot_of(1).token)

    # When the instance waits in the pool past a holder TTL, and node 2's drain asks
    clock.advance(int(TTL.total_seconds()) + 60)
    decision = blue.acquire(slot_of(2))

    # Then it gets the slot: the pooled node is out of service on purpose, not a disruption the budget counts
    assert decision.granted, decision
