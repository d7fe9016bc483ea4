"""The drain of a node some of whose pods are in a namespace being deleted, on the real Kubernetes adapter against
the sandbox API server, which refuses every create there (an eviction, an Event) as kube-apiserver's
NamespaceLifecycle admission does: 403 Forbidden, cause NamespaceTerminating. Those pods are the namespace
controller's to delete; nobody could make their eviction pass. The drain waits for them without an alarm and
without writing Events where none can be written; its timeout policy still applies to them on time."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_cluster, drain_server, evict_step
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import (
    FakeEvents,
    terminating,
)

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
SEED = {
    "namespaces": ["shop", "team"],
    "nodes": [{"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"}],
    "deployments": [
        {"name": "web", "namespace": "shop", "replicas": 3},
        {"name": "api", "namespace": "team", "replicas": 1},
    ],
}
DEADLINE = T0 + timedelta(seconds=600)  # the drain timeout of the unit tests' policy


@pytest.fixture
def server() -> Iterator[KubeServer]:
    # A namespace controller that has not got to the namespace yet (busy, or failing): its pods still run
    with drain_server(SEED, namespace_controller_lag_seconds=3600) as kube:
        with kube.api_client() as admin:  # cordoned: no replacement of an evicted pod lands on it
            CoreV1Api(admin).patch_node(NODE, {"spec": {"unschedulable": True}})
        yield kube


@pytest.fixture
def cluster(server: KubeServer) -> Iterator[KubeCluster]:
    with drain_cluster(server) as adapter:
        yield adapter


def draining(**changes: object) -> LifecycleRecord:
    identity = {"id": f"{INSTANCE}/terminate/token", "instance_id": INSTANCE, "node": NODE}
    drain = {"drain_started_at": T0, "drain_deadline": DEADLINE}
    return terminating(Step.EVICT, **identity, **drain, **changes)


def evict(cluster: KubeCluster, metrics: FakeMetrics, events: FakeEvents) -> Evict:
    return evict_step(cluster, NODE, INSTANCE, metrics=metrics, events=events)


def delete_namespace(server: KubeServer, namespace: str) -> None:
    """Delete the namespace through the API, as ``kubectl delete namespace`` does."""
    with server.api_client() as admin:
        request = admin.param_serialize(
            "DELETE", f"/api/v1/namespaces/{namespace}", header_params={}, auth_settings=["BearerToken"]
        )
        assert admin.call_api(*request).status == 200
    assert server.get_object("namespaces", namespace) is not None, "the namespace went at once"


def deleting(server: KubeServer, namespace: str) -> list[str]:
    """The names of the namespace's pods that are being deleted."""
    return [
        pod["metadata"]["name"]
        for pod in server.objects("pods", namespace)
        if pod["metadata"].get("deletionTimestamp")
    ]


def evictions(server: KubeServer) -> int:
    return server.counters().get(("create", "pods/eviction"), 0)


def test_pods_of_a_namespace_being_deleted_are_waited_for_without_an_alarm_an_event_or_asking_again(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a node with three pods of a namespace being deleted, and one of another namespace
    delete_namespace(server, "shop")
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics, events)

    # When the drain asks the node's pods to leave, twice
    server.reset_counters()
    first = step(draining(), T0)
    asked_first = evictions(server)
    second = step(draining(extra=first.changes["extra"]), T0 + timedelta(seconds=2))

    # Then the other namespace's pod is evicted, and the namespace's are neither an alarm nor told
    assert first.changes["pods_evicted"] == 1
    assert "EvictionErrors" not in metrics.counts
    assert [reason for _, reason, _ in events.written if reason.startswith("Eviction")] == []
    # nor asked again: one refusal of the namespace tells for all its pods, at the first pass and after
    assert asked_first == 2
    assert evictions(server) == asked_first
    assert first.again
    assert second.again
    assert len(server.objects("pods", "shop")) == 3


def test_pods_of_a_namespace_being_deleted_meet_the_timeout_policy_on_time(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose pods of a namespace being deleted were asked once and are still there at its deadline
    delete_namespace(server, "shop")
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics, events)
    first = step(draining(), T0)

    # When the deadline comes
    server.reset_counters()
    timed_out = step(draining(extra=first.changes["extra"]), DEADLINE)

    # Then the force policy deletes them (a delete is taken there), without an alarm
    assert timed_out.changes["forced_at"] == DEADLINE
    assert all(pod["metadata"].get("deletionTimestamp") for pod in server.objects("pods", "shop"))
    assert "EvictionErrors" not in metrics.counts
    assert metrics.counts["DrainTimeouts"] == 1
