"""A contended PodDisruptionBudget over several pods of the node (see test_kube_drain_budget_conflicts.py): each of
its evictions is answered the budget's 409 Conflict about 10 s late (kube-apiserver's 20 tries of its status write,
500 ms apart). A pass that spent its failures on them stopped before the node's other pods, pass after pass while the
budget's pods not yet asked came first (those never failed go first), so that the others waited a pass and its
Retry-After for every two of them."""

from __future__ import annotations

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle_sandbox.kube import KubeServer, eviction
from nodecycle_sandbox.kube.meta import SHUTDOWN_ANNOTATION
from tests.integration.kube.cluster import evict_step
from tests.integration.kube.test_kube_drain_budget_conflicts import budgets
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining, on_its_way_out
from tests.support.fakes import T0, FakeMetrics

SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "deployments": [
        {"name": "web", "namespace": "shop", "replicas": 6, "labels": {"app": "web"}},
        {"name": "worker", "namespace": "shop", "replicas": 4, "labels": {"app": "worker"}},
    ],
}


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    # (the handler's 20 tries without their 500 ms apart: the answers are the same, sooner)
    monkeypatch.setattr(eviction, "CONFLICT_RETRY_SECONDS", 0.01)


def test_the_other_pods_of_a_contended_budgets_controller_wait_for_the_next_poll_and_the_nodes_others_do_not(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a budget for each app, the web budget's status written by others at every eviction's try, and three web
    # pods first on the node, then workers
    budgets(server)
    pods = cluster.pods_on(NODE)
    web = [pod for pod in pods if pod.name.startswith("web-")]
    workers = [pod for pod in pods if pod.name.startswith("worker-")]
    assert len(web) >= 3, "the test needs three web pods first on the node, then workers"
    assert workers, "the test needs workers on the node"
    server.contend_budget("shop", "web")
    metrics = FakeMetrics()
    step = evict_step(cluster, NODE, INSTANCE, metrics=metrics)

    # When the drain asks the node's pods to leave
    outcome = step(draining(), T0)

    # Then the workers are evicted in this very pass, and one call only was spent on the web pods (about 10 s on a
    # real API server): their controller's other pods, under the same budget, are asked at the next poll
    assert all(on_its_way_out(server, pod) for pod in workers)
    assert not any(on_its_way_out(server, pod) for pod in web)
    assert metrics.counts["StepRetries[step=evict]"] == 1
    assert outcome.again
    assert outcome.delay >= 10


def test_a_pod_being_deleted_of_a_contended_budgets_controller_has_its_deletion_shortened_in_the_same_pass(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the web budget's status written by others at every eviction's try, and one of the node's web pods being
    # deleted by someone else (a rollout, an operator) with a grace of 15 minutes, past the drain's cap
    budgets(server)
    web = [pod for pod in cluster.pods_on(NODE) if pod.name.startswith("web-")]
    assert len(web) >= 2, "the test needs two web pods on the node"
    slow = web[-1]
    with server.api_client() as admin:  # (it takes its grace to stop: still there at the drain's pass)
        CoreV1Api(admin).patch_namespaced_pod(
            slow.name, slow.namespace, {"metadata": {"annotations": {SHUTDOWN_ANNOTATION: "3600"}}}
        )
    cluster.delete_pod(slow, 900)
    server.contend_budget("shop", "web")
    step = evict_step(cluster, NODE, INSTANCE, metrics=FakeMetrics())

    # When the drain asks the node's pods to leave: its other web pods' evictions are answered "due to conflicts"
    step(draining(), T0)

    # Then the pod being deleted is asked again in this very pass, and its deletion shortened to the drain's grace:
    # kube-apiserver evicts a pod being deleted without its budgets (canIgnorePDB: no status write of the budget, no
    # contention), so its controller's contention is no reason to leave it to its own 15 minutes until the next poll
    shortened = next(pod for pod in cluster.pods_on(NODE) if pod.uid == slow.uid)
    assert shortened.deletion_grace is not None
    assert shortened.deletion_grace < 900
