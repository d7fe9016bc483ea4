"""A PodDisruptionBudget other writers keep updating (many evictions at once under it: a refresh draining many nodes,
several stacks), on the real Kubernetes adapter against the sandbox API server: kube-apiserver's eviction handler
tries its status write 20 times, 500 ms apart (pkg/registry/core/pod/storage/eviction.go, EvictionsRetry), and then
answers that write's last conflict: a 409 Conflict on poddisruptionbudgets.policy "web", no Retry-After (retry.
RetryOnConflict returns the last conflict once its steps run out, client-go util/retry; kubernetes/client-go#427:
the handler's 504 Timeout "... due to conflicts" with Retry-After 10 is never sent). That 409 is the budget's, not
the pod's: read as the pod gone (the 409 of a uid precondition), the pass went on to the controller's other pods
under the same budget, each another 10 s; taken for a server shedding load, it stopped the drain's whole pass."""

from __future__ import annotations

from datetime import timedelta
from typing import cast

import pytest
from kubernetes.client import CoreV1Api, PolicyV1Api, V1PodDisruptionBudget

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle_sandbox.kube import KubeServer, eviction
from tests.integration.kube.cluster import evict_step
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining, on_its_way_out
from tests.support.fakes import T0, FakeMetrics

SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "deployments": [
        {"name": "web", "namespace": "shop", "replicas": 2, "labels": {"app": "web"}},
        {"name": "worker", "namespace": "shop", "replicas": 4, "labels": {"app": "worker"}},
    ],
}


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    # (the handler's 20 tries without their 500 ms apart: the answers are the same, sooner)
    monkeypatch.setattr(eviction, "CONFLICT_RETRY_SECONDS", 0.01)


def budgets(server: KubeServer) -> None:
    """A budget of its own for each app, each with room for every pod of the node."""
    policy_api = PolicyV1Api(CoreV1Api(server.api_client()).api_client)
    for app in ("web", "worker"):
        budget = {
            "metadata": {"name": app, "namespace": "shop"},
            "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"app": app}}},
        }
        # (as JSON: the client sends a dict as it is)
        policy_api.create_namespaced_pod_disruption_budget("shop", cast("V1PodDisruptionBudget", budget))
    server.settle()


def test_a_budget_whose_status_writes_keep_conflicting_holds_its_pods_only(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a budget for each app, and the web budget's status written by others at every eviction's try
    budgets(server)
    pods = cluster.pods_on(NODE)
    web = [pod for pod in pods if pod.name.startswith("web-")]
    workers = [pod for pod in pods if pod.name.startswith("worker-")]
    assert len(web) == 1, "the test needs the one web pod first on the node, then workers"
    assert workers, "the test needs workers on the node"
    server.contend_budget("shop", "web")
    metrics = FakeMetrics()
    step = evict_step(cluster, NODE, INSTANCE, metrics=metrics)

    # When the drain asks the node's pods to leave
    outcome = step(draining(), T0)

    # Then the workers are evicted in this very pass: only the web pod waits for its budget
    assert all(on_its_way_out(server, pod) for pod in workers)
    assert not on_its_way_out(server, web[0])
    # And that pod is asked again no sooner than the server said (10 s), a retry, not an eviction error (the alarm)
    assert outcome.again
    assert outcome.delay >= 10
    assert metrics.counts["StepRetries[step=evict]"] == 1
    assert metrics.counts.get("EvictionErrors", 0) == 0

    # And once the budget's other writers are done, the next poll evicts it
    server.contend_budget("shop", "web", contended=False)
    record = draining().model_copy(update=dict(outcome.changes))
    again = step(record, T0 + timedelta(seconds=outcome.delay))
    assert again.again
    assert on_its_way_out(server, web[0])
