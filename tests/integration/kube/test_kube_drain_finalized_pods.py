"""Pods the force policy deleted, stopped by their kubelet and kept by a finalizer nobody removes, on the real
Kubernetes adapter against the sandbox API server. The API server keeps such a pod, Terminating, with no grace
left (deletionGracePeriodSeconds 0: its kubelet is done with it), until its finalizers go; nothing runs for it.
Past the drain's timeout, its policy has acted: such a pod holds the slot no longer (invariant 10: no slot held
past the timeout, the force grace and a margin)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubernetes.client import CoreV1Api, PolicyV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.common import STUCK_AFTER
from nodecycle.domain.model import Step
from nodecycle_sandbox.chaos.invariants import SLOT_MARGIN
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import FORCE_GRACE, evict_step
from tests.integration.kube.forced_drain import INSTANCE, NODE, forced_past_its_timeout
from tests.integration.kube.forced_drain import SEED as SEED  # (read by conftest.py's server fixture)
from tests.sandbox.kube.conftest import wait_until
from tests.support.fakes import FakeMetrics
from tests.unit.drain.test_drain_steps import FakeSlots, policy, terminating

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
    # When the drain polls at its own delays, its timeout's force policy deleting the pods, whose kubelet stops them
    record, deadline, ended_at = forced_past_its_timeout(
        cluster, server, timeout=TIMEOUT, horizon=timedelta(seconds=120)
    )

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


def test_pods_their_kubelet_stopped_that_a_finalizer_keeps_are_waited_for_a_minute_not_until_the_timeout(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node cordoned, its web pods carrying a finalizer nobody will remove, and no budget in their way
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    kept = [pod for pod in cluster.pods_on(NODE) if pod.controller_kind == "ReplicaSet"]
    assert len(kept) == 2, "the test needs two web pods on the node"
    for pod in kept:
        admin.patch_namespaced_pod(
            pod.name, pod.namespace, {"metadata": {"finalizers": ["example.com/keep"]}}
        )
    PolicyV1Api(server.api_client()).delete_namespaced_pod_disruption_budget("web", "shop")
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start,
        drain_deadline=start + policy().timeout,
    )
    metrics = FakeMetrics()
    step = evict_step(
        cluster, NODE, INSTANCE, metrics=metrics, slots=FakeSlots(holders={NODE}, held_for={NODE: record.id})
    )

    # When the drain evicts them, and their live kubelet stops them: the API server keeps each, Terminating with no
    # grace left (deletionGracePeriodSeconds 0), for its finalizer
    first = step(record, start)
    record = record.model_copy(update=first.changes)
    assert metrics.counts["PodsEvicted"] == 2

    def stopped() -> bool:
        found = [server.get_object("pods", pod.name, pod.namespace) for pod in kept]
        return all(p is not None and p["metadata"].get("deletionGracePeriodSeconds") == 0 for p in found)

    wait_until(stopped, what="the kubelet to stop the pods")

    # Then the drain gives their finalizers' controller a minute from their deletion (a Job's tracking finalizer goes
    # within seconds), not more
    waiting = step(record, start + STUCK_AFTER / 2)
    record = record.model_copy(update=waiting.changes)
    assert (waiting.then, waiting.again) == (None, True)
    done = step(record, start + STUCK_AFTER + timedelta(seconds=2))
    # and ends drained long before its timeout, the pods left terminating counted and named, nothing forced
    assert done.changes["outcome"] == "drained; 2 pods left terminating (past their deletion deadline)"
    assert metrics.counts["PodsLeftTerminating"] == 2
    assert "DrainTimeouts" not in metrics.counts
    assert done.changes.get("forced_at") is None
    assert sorted(done.changes["extra"]["stuck_pods"]["pods"]) == sorted(f"shop/{p.name}" for p in kept)
