"""When a drain's time starts, on the real adapters against the sandbox API server and the real clock: the cordon step
reads the node and confirms the drain's slot in the budget's ConfigMap before its PATCH, and a loaded control plane
answers those reads late (seed 219 scenario 4 of the fault campaign: 150 ms between the step's start and the cordon,
with no fault; a ``kube-slow`` read, up to 1.5 s). The pods are promised ``DrainTimeoutSeconds`` after the cordon
(README: "after DrainTimeoutSeconds the TimeoutPolicy applies"; design invariant 9: time spent on the slot is never
the drain's). Dated from the step's start, the force policy deleted them that much early, below their
PodDisruptionBudget's floor by the API server's clock."""

from __future__ import annotations

from datetime import timedelta

from kubernetes import client

from nodecycle.adapters.clock import SystemClock
from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.model import Step
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import FakeMetrics
from tests.unit.drain.test_drain_steps import OWNER, cordon, policy

SEED = drain_steps.SEED
SLOW = 0.5  # seconds each read of the budget's ConfigMap is answered late


def test_a_drains_time_starts_when_its_cordon_lands_not_while_its_slot_is_confirmed(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain granted its slot by the budget in its ConfigMap, on the real clock, at its cordon, and an API
    # server that answers the ConfigMap's reads late
    clock = SystemClock()
    core = client.CoreV1Api(server.api_client())
    budget = DisruptionBudget(
        store=ConfigMapBudgetStore(lambda: core, NAMESPACE),
        nodes=KubeNodeInventory(lambda: core),
        clock=clock,
        metrics=FakeMetrics(),
        limits=BudgetLimits(Quantity(value=1)),
        holder_ttl=timedelta(minutes=10),
        count_unavailable=False,
        owner=OWNER,
    )
    begun = clock.now()
    record = draining(
        Step.CORDON, zone="eu-west-1a", received_at=begun, global_deadline=begun + 3 * policy().timeout
    )
    request = SlotRequest(NODE, INSTANCE, "eu-west-1a", OWNER, record.id, record.token, record.received_at)
    assert budget.acquire(request).granted
    server.faults.arm([Fault("slow", "kube-slow", "GET configmaps", limit=1, value=SLOW)], seed=1)

    # When the cordon step runs, begun on that clock
    outcome = cordon(cluster, slots=budget, clock=clock)(record, clock.now())

    # Then the node is cordoned after the slowed read, and the drain's time starts no sooner than the cordon landed
    # on the API server: its pods get the whole drain timeout after it
    assert server.faults.counts() == {"kube-slow": 1}
    landed = next(
        entry.time
        for entry in server.history()
        if entry.kind == "Node" and entry.name == NODE and entry.unschedulable
    )
    assert landed - begun.timestamp() >= SLOW
    started = outcome.changes["drain_started_at"]
    assert started.timestamp() >= landed
    assert outcome.changes["drain_deadline"] == started + policy().timeout
