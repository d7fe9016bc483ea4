"""A pod whose PodDisruptionBudget is still being processed (just created or edited, not yet observed by its
controller), on the real Kubernetes adapter against the sandbox API server: the eviction subresource answers 429
with Retry-After 10, and the node cannot be empty before that pod is asked again, so the drain's next poll comes
no sooner than that (its usual polls, 1 s, 2 s, 4 s..., would each only meet the same answer)."""

from __future__ import annotations

from datetime import timedelta

from kubernetes.client import PolicyV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import Evict
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import evict_step
from tests.integration.kube.test_kube_drain_steps import DEADLINE, INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeMetrics

SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 4, "pdb": {"maxUnavailable": 1}}],
}


def evict(cluster: KubeCluster, metrics: FakeMetrics) -> Evict:
    return evict_step(cluster, NODE, INSTANCE, metrics=metrics)


def test_a_pod_whose_budget_is_still_being_processed_is_asked_again_no_sooner_than_its_retry_after(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the web pods' budget just edited, before the disruption controller's pass
    metrics = FakeMetrics()
    with server.paused_controllers():
        PolicyV1Api(server.api_client()).patch_namespaced_pod_disruption_budget(
            "web", "shop", {"spec": {"maxUnavailable": 2}}
        )

        # When the drain asks the node's pods to leave, at its first poll and near its deadline
        first = evict(cluster, metrics)(draining(), T0)
        near_deadline = evict(cluster, metrics)(draining(extra={"polls": 1}), DEADLINE - timedelta(seconds=4))

    # Then its next poll comes after the server's Retry-After, not after its first poll's second; and never past
    # the drain's deadline
    assert metrics.counts["EvictionsBlockedByPdb"] > 0
    assert first.again
    assert first.delay == 10
    assert near_deadline.delay == 4
