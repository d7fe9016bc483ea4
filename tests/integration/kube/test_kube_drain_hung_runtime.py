"""A node whose container runtime hangs (a wedged containerd: StopContainer never returns), on the real
Kubernetes adapter against the sandbox API server: its kubelet lives (it renews the node's Lease, the node stays
Ready) but stops none of the pods deleted there, so they stay Terminating past their grace; nothing tells the drain
that they will never go. Invariant 10: no drain holds its slot past its timeout, the force grace and a margin."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle_sandbox.chaos.invariants import SLOT_MARGIN
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.meta import JsonObj
from tests.integration.kube.cluster import FORCE_GRACE, TIMEOUT, evict_step
from tests.unit.drain.test_drain_steps import FakeSlots, policy, terminating

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    # a budget that allows no disruption: the drain's evictions are refused until its timeout forces the pods
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 4, "pdb": {"maxUnavailable": 0}}],
}


def _web_pods(server: KubeServer) -> list[JsonObj]:
    pods = [p for p in server.objects("pods", "shop") if (p.get("spec") or {}).get("nodeName") == NODE]
    assert len(pods) == 2, "the test needs two web pods on the node"
    return pods


def test_a_hung_runtime_stops_no_pod_its_live_kubelet_is_asked_to_delete(server: KubeServer) -> None:
    # Given the node's container runtime hung
    admin = CoreV1Api(server.api_client())
    server.hang_runtime(NODE)
    one, other = (p["metadata"]["name"] for p in _web_pods(server))

    # When one of its pods is deleted with a second of grace, and another with none (a finalizer keeping it)
    admin.delete_namespaced_pod(one, "shop", grace_period_seconds=1)
    admin.patch_namespaced_pod(other, "shop", {"metadata": {"finalizers": ["example.com/keep"]}})
    admin.delete_namespaced_pod(other, "shop", grace_period_seconds=0)
    server.settle()  # (pods stop at once on a healthy node here: pod_shutdown_seconds 0)

    # Then the first stays Terminating past its grace, its deletion never finished; the node is Ready
    found = server.get_object("pods", one, "shop")
    assert found is not None
    assert found["metadata"]["deletionGracePeriodSeconds"] == 1
    node = server.get_object("nodes", NODE) or {}
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
    # and the one deleted with grace 0 has what the API server gives it alone, at once
    kept = server.get_object("pods", other, "shop")
    assert kept is not None
    assert kept["metadata"]["deletionGracePeriodSeconds"] == 0
    # and once the runtime answers again, the first goes
    server.hang_runtime(NODE, hung=False)
    server.settle()
    assert server.get_object("pods", one, "shop") is None


def test_pods_a_hung_runtime_never_stops_hold_the_slot_no_longer_than_the_force_grace_and_the_margin(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node cordoned, its web pods' budget refusing every eviction, its container runtime hung
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    server.hang_runtime(NODE)
    # (its deadline now, by the API server's clock, which times the force's deletions: the drain began a timeout
    # ago, when its pods' budget first refused them)
    deadline = datetime.now(UTC)
    start = deadline - TIMEOUT
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start,
        drain_deadline=deadline,
    )
    step = evict_step(
        cluster,
        NODE,
        INSTANCE,
        slots=FakeSlots(holders={NODE}, held_for={NODE: record.id}),
        drain_policy=policy(timeout_policy="force"),
    )

    # When the drain polls at its own delays, its timeout's force policy deleting the pods, which never stop
    at, ended_at = start, None
    while at <= deadline + timedelta(seconds=300):
        outcome = step(record, at)
        server.settle()
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            ended_at = at
            break
        # (from its first poll straight to its deadline: nothing changes in between)
        at = max(at + timedelta(seconds=max(outcome.delay, 1)), deadline)

    # Then the pods are still there, Terminating, and the drain ended within its timeout, the force grace and the
    # margin, leaving them
    assert all(p["metadata"].get("deletionTimestamp") for p in _web_pods(server))
    assert ended_at is not None
    assert ended_at <= deadline + FORCE_GRACE + timedelta(seconds=SLOT_MARGIN), ended_at - deadline
    assert record.outcome == "drain-timeout-forced; 2 pods left terminating (past their deletion deadline)"
