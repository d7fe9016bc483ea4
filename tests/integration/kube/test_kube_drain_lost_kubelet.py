"""A drain of a node whose kubelet is lost, on the real Kubernetes adapter against the sandbox API server: the
node lifecycle controller marks the node's pods not Ready, so a PodDisruptionBudget counts them unhealthy, and
the Eviction API lets such a pod go only while the budget has its desired healthy count (the default
unhealthyPodEvictionPolicy, IfHealthyBudget). The drain must respect that answer, tell it, end by its timeout
policy, and not wait for pods that no kubelet will ever stop."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubernetes.client import CoreV1Api, PolicyV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import CHECK_NODE_AFTER, Evict
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.cluster import PodInfo
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import TIMEOUT, evict_step
from tests.support.fakes import FakeMetrics
from tests.unit.drain.test_drain_steps import (
    FakeEvents,
    terminating,
)

LOST = "ip-10-0-1-10.eu-west-1.compute.internal"
LOST_INSTANCE = "i-0a1b2c3d4e5f60101"
OTHER = "ip-10-0-2-10.eu-west-1.compute.internal"
OTHER_INSTANCE = "i-0a1b2c3d4e5f60201"
SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": LOST_INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": OTHER_INSTANCE, "zone": "eu-west-1b"},
    ],
    # two pods on each node, one unavailable allowed
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 4, "pdb": {"maxUnavailable": 1}}],
}


def web_pods(cluster: KubeCluster, node: str) -> list[PodInfo]:
    pods = [pod for pod in cluster.pods_on(node) if pod.controller_kind == "ReplicaSet"]
    assert len(pods) == 2, "the test needs two web pods on the node"
    return pods


def draining(node: str, instance: str, start: datetime) -> LifecycleRecord:
    return terminating(
        Step.EVICT,
        id=f"{instance}/terminate/token",
        instance_id=instance,
        node=node,
        drain_started_at=start,
        drain_deadline=start + TIMEOUT,
    )


def evict(cluster: KubeCluster, node: str, instance: str, events: FakeEvents, metrics: FakeMetrics) -> Evict:
    return evict_step(cluster, node, instance, metrics=metrics, events=events)


def healthy(server: KubeServer) -> int:
    pdb = server.get_object("poddisruptionbudgets", "web", "shop") or {}
    return int((pdb.get("status") or {}).get("currentHealthy", -1))


def test_a_lost_nodes_unhealthy_pods_are_blocked_by_their_budget_until_the_timeout_forces_them_and_then_not_waited_for(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given both nodes cordoned, and the kubelet of one lost: the node turns Unknown and its two web pods not
    # Ready, so the budget (3 healthy needed of 4) has 2 healthy and allows nothing
    admin = CoreV1Api(server.api_client())
    for node in (LOST, OTHER):
        admin.patch_node(node, {"spec": {"unschedulable": True}})
    lost_pods, other_pods = web_pods(cluster, LOST), web_pods(cluster, OTHER)
    server.kill_kubelet(LOST, grace_seconds=0)
    wait_for(lambda: healthy(server) == 2, 10, "the budget to count the lost node's pods unhealthy")
    start = datetime.now(UTC)
    events, metrics = FakeEvents(), FakeMetrics()
    step = evict(cluster, LOST, LOST_INSTANCE, events, metrics)
    record = draining(LOST, LOST_INSTANCE, start)

    # When the lost node is drained
    first = step(record, start)
    record = record.model_copy(update=first.changes)

    # Then its unhealthy pods' evictions are refused (the budget is not at its desired healthy count), the
    # drain waits, and says so once per pod, on the pod and on the node, and in its metric
    assert (first.then, first.again) == (None, True)
    assert all(
        not (server.get_object("pods", p.name, "shop") or {})["metadata"].get("deletionTimestamp")
        for p in lost_pods
    )
    assert metrics.counts["EvictionsBlockedByPdb"] == 2
    blocked = [subject for subject, reason, _ in events.written if reason == "EvictionBlocked"]
    assert sorted(blocked) == sorted([f"shop/{p.name}" for p in lost_pods] + [LOST, LOST])

    # And a drain of the other node, whose web pods are Ready, is held by the same budget: nothing may go
    other_metrics = FakeMetrics()
    other_step = evict(cluster, OTHER, OTHER_INSTANCE, FakeEvents(), other_metrics)
    other = other_step(draining(OTHER, OTHER_INSTANCE, start), start)
    assert (other.then, other.again) == (None, True)
    assert other_metrics.counts["EvictionsBlockedByPdb"] == 2
    assert all(server.get_object("pods", p.name, "shop") is not None for p in other_pods)

    # When the lost node's drain reaches its timeout, Then the force policy deletes its pods
    forced = step(record, start + TIMEOUT)
    record = record.model_copy(update=forced.changes)
    assert (forced.then, forced.again) == (None, True)
    assert all(
        (server.get_object("pods", p.name, "shop") or {})["metadata"].get("deletionTimestamp")
        for p in lost_pods
    )

    # When their force grace is over, Then they are still there, Terminating (no kubelet stops them), and the
    # drain stops waiting for them and says why
    done = step(record, start + TIMEOUT + timedelta(seconds=6))
    assert all(server.get_object("pods", p.name, "shop") is not None for p in lost_pods)
    assert done.changes["outcome"] == "drain-timeout-forced; 2 pods left terminating (node not ready)"


def test_a_lost_nodes_unhealthy_pods_under_a_budget_that_always_lets_them_go_are_evicted_and_left_long_before_the_timeout(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the same budget, with unhealthyPodEvictionPolicy AlwaysAllow (policy/v1, GA in 1.31: kube-apiserver's
    # eviction deletes a pod that is not Ready without looking at the budget's room), both nodes cordoned, and the
    # kubelet of one lost: its two web pods not Ready, the budget at 2 healthy of the 3 it needs
    admin = CoreV1Api(server.api_client())
    PolicyV1Api(server.api_client()).patch_namespaced_pod_disruption_budget(
        "web", "shop", {"spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}}
    )
    for node in (LOST, OTHER):
        admin.patch_node(node, {"spec": {"unschedulable": True}})
    lost_pods, other_pods = web_pods(cluster, LOST), web_pods(cluster, OTHER)
    server.kill_kubelet(LOST, grace_seconds=0)
    wait_for(lambda: healthy(server) == 2, 10, "the budget to count the lost node's pods unhealthy")
    start = datetime.now(UTC)
    events, metrics = FakeEvents(), FakeMetrics()
    step = evict(cluster, LOST, LOST_INSTANCE, events, metrics)
    record = draining(LOST, LOST_INSTANCE, start)

    # When the lost node is drained
    first = step(record, start)
    record = record.model_copy(update=first.changes)

    # Then its unhealthy pods are evicted whatever the budget's room: being deleted, with no kubelet to stop them,
    # and nothing told blocked
    assert (first.then, first.again) == (None, True)
    assert metrics.counts["PodsEvicted"] == 2
    assert "EvictionsBlockedByPdb" not in metrics.counts
    assert all(
        (server.get_object("pods", p.name, "shop") or {})["metadata"].get("deletionTimestamp")
        for p in lost_pods
    )
    # And the other node's Ready pods are still held by the budget: the policy lets only unhealthy pods go
    other_metrics = FakeMetrics()
    other = evict(cluster, OTHER, OTHER_INSTANCE, FakeEvents(), other_metrics)(
        draining(OTHER, OTHER_INSTANCE, start), start
    )
    assert (other.then, other.again) == (None, True)
    assert other_metrics.counts["EvictionsBlockedByPdb"] == 2
    assert all(server.get_object("pods", p.name, "shop") is not None for p in other_pods)

    # When the drain looks again once its evictions are overdue on the node Ready=Unknown
    done = step(record, start + CHECK_NODE_AFTER + timedelta(seconds=1))

    # Then it waits for them no longer, long before its timeout: no timeout counted, no force
    assert all(server.get_object("pods", p.name, "shop") is not None for p in lost_pods)
    assert done.changes["outcome"] == "drained; 2 pods left terminating (node not ready)"
    assert "DrainTimeouts" not in metrics.counts
    assert done.changes.get("forced_at") is None
