"""A node whose container runtime hangs (a wedged containerd: StopContainer never returns), on the real
Kubernetes adapter against the sandbox API server: its kubelet lives (it renews the node's Lease, the node stays
Ready) but stops none of the pods deleted there, so they stay Terminating past their grace; nothing tells the drain
that they will never go. Invariant 10: no drain holds its slot past its timeout, the force grace and a margin."""

from __future__ import annotations

from datetime import timedelta

from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle_sandbox.chaos.invariants import SLOT_MARGIN
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.meta import JsonObj
from tests.integration.kube.cluster import FORCE_GRACE, TIMEOUT
from tests.integration.kube.forced_drain import NODE, forced_past_its_timeout
from tests.integration.kube.forced_drain import SEED as SEED  # (read by conftest.py's server fixture)


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
    # When the drain polls at its own delays, its timeout's force policy deleting the pods, which never stop
    record, deadline, ended_at = forced_past_its_timeout(
        cluster, server, timeout=TIMEOUT, horizon=timedelta(seconds=300)
    )

    # Then the pods are still there, Terminating, and the drain ended within its timeout, the force grace and the
    # margin, leaving them
    assert all(p["metadata"].get("deletionTimestamp") for p in _web_pods(server))
    assert ended_at is not None
    assert ended_at <= deadline + FORCE_GRACE + timedelta(seconds=SLOT_MARGIN), ended_at - deadline
    assert record.outcome == "drain-timeout-forced; 2 pods left terminating (past their deletion deadline)"
