"""A PodDisruptionBudget whose selector matches the pods of two apps, on the real Kubernetes adapter against the
sandbox API server: the disruption controller counts the replicas of both apps' controllers, so the budget's one
disruption is shared by them, and a pod of either app waits for the other's replacement (429 meanwhile). The drain
evicts both apps' pods, one at a time, never past the budget, and ends drained before its timeout (invariants 1,
2: no pod of the node is forced, none counted gone that is not)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import cast

from kubernetes.client import CoreV1Api, PolicyV1Api, V1PodDisruptionBudget

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import TIMEOUT, evict_step
from tests.support.fakes import FakeMetrics
from tests.unit.drain.test_drain_steps import FakeSlots, terminating

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "deployments": [
        {"name": name, "namespace": "shop", "replicas": 2, "labels": {"app": name, "tier": "front"}}
        for name in ("web", "api")
    ],
}


def _healthy(server: KubeServer) -> int:
    return sum(
        1
        for p in server.objects("pods", "shop")
        if not p["metadata"].get("deletionTimestamp")
        and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or [])
    )


def test_a_budget_shared_by_two_apps_lets_their_pods_go_one_at_a_time_and_the_drain_ends_drained(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given one budget over both apps (4 pods, at most 1 unavailable), the node cordoned with a pod of each
    admin = CoreV1Api(server.api_client())
    policy_api = PolicyV1Api(admin.api_client)
    budget = {
        "metadata": {"name": "front", "namespace": "shop"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"tier": "front"}}},
    }
    # (as JSON: the client sends a dict as it is)
    policy_api.create_namespaced_pod_disruption_budget("shop", cast("V1PodDisruptionBudget", budget))
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    server.settle()
    on_node = {
        p["metadata"]["labels"]["app"]
        for p in server.objects("pods", "shop")
        if p["spec"]["nodeName"] == NODE
    }
    assert on_node == {"web", "api"}

    # When the drain polls at its own delays, the cluster settling between its polls
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start,
        drain_deadline=start + TIMEOUT,
    )
    metrics = FakeMetrics()
    step = evict_step(
        cluster, NODE, INSTANCE, metrics=metrics, slots=FakeSlots(holders={NODE}, held_for={NODE: record.id})
    )
    at, lowest = start, _healthy(server)
    while at < start + TIMEOUT:
        outcome = step(record, at)
        lowest = min(lowest, _healthy(server))
        server.settle()
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            break
        at += timedelta(seconds=max(outcome.delay, 1))

    # Then it ended drained before its timeout, both pods evicted, the second only once the first's replacement
    # was ready (a refusal meanwhile), the apps never more than one pod short together
    assert not outcome.again
    assert record.outcome == "drained"
    assert record.pods_evicted == 2
    assert metrics.counts.get("EvictionsBlockedByPdb", 0) >= 1
    assert lowest >= 3
    admin.api_client.close()
