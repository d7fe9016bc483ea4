"""Pods the force policy deleted, stopped by their kubelet and kept by a finalizer nobody removes, on the real
Kubernetes adapter against the sandbox API server. The API server keeps such a pod, Terminating, with no grace
left (deletionGracePeriodSeconds 0: its kubelet is done with it), until its finalizers go; nothing runs for it.
Past the drain's timeout, its policy has acted: such a pod holds the slot no longer (invariant 10: no slot held
past the timeout, the force grace and a margin)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle_sandbox.chaos.invariants import SLOT_MARGIN
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import FORCE_GRACE, evict_step
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
TIMEOUT = timedelta(seconds=10)


def test_pods_the_force_policy_stopped_that_a_finalizer_keeps_hold_the_slot_no_longer(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node cordoned, its web pods carrying a finalizer nobody will remove (its controller is down),
    # their budget refusing every eviction
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    kept = [pod for pod in cluster.pods_on(NODE) if pod.controller_kind == "ReplicaSet"]
    assert len(kept) == 2, "the test needs two web pods on the node"
    for pod in kept:
        admin.patch_namespaced_pod(
            pod.name, pod.namespace, {"metadata": {"finalizers": ["example.com/keep"]}}
        )
    # (its deadline now, by the API server's clock, which times the force's deletions: the drain began a timeout
    # ago)
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

    # When the drain polls at its own delays, its timeout's force policy deleting the pods, whose kubelet stops them
    at, ended_at = start, None
    while at <= deadline + timedelta(seconds=120):
        outcome = step(record, at)
        server.settle()
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            ended_at = at
            break
        # (from its first poll straight to its deadline: nothing changes in between)
        at = max(at + timedelta(seconds=max(outcome.delay, 1)), deadline)

    # Then the pods are still there, stopped, kept by their finalizer
    for pod in kept:
        found = server.get_object("pods", pod.name, pod.namespace)
        assert found is not None
        assert found["metadata"]["deletionGracePeriodSeconds"] == 0
    # and the drain ended, the pods left terminating, within its timeout, the force grace and the margin
    assert ended_at is not None
    assert ended_at <= deadline + FORCE_GRACE + timedelta(seconds=SLOT_MARGIN), ended_at - deadline
    assert record.outcome == (
        "drain-timeout-forced; 2 pods left terminating (deleted with no grace left, kept by finalizers)"
    )
    assert sorted(record.extra["stuck_pods"]["pods"]) == sorted(f"shop/{p.name}" for p in kept)
