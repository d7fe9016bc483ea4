"""The drain of a node whose pods the namespace controller deletes, their namespace being deleted, on the real
Kubernetes adapter against the sandbox API server. The namespace controller deletes each pod with its own grace
(no grace of its own in the delete: the pod's terminationGracePeriodSeconds), which may run far past the drain's
grace cap. No eviction is taken there (NamespaceLifecycle: 403, cause NamespaceTerminating), but a delete is, and
the eviction of a pod already being deleted would have been that delete (kube-apiserver's eviction handler ignores
the budgets of a pod being deleted: canIgnorePDB, pkg/registry/core/pod/storage/eviction.go): the drain shortens
their deletion to its cap with a delete, as its eviction shortens that of a pod someone else deleted elsewhere."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_cluster, drain_server, evict_step
from tests.integration.kube.test_kube_drain_ending_namespace import (
    INSTANCE,
    NODE,
    delete_namespace,
    draining,
)
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents

LONG_GRACE = 3600  # the pods' own grace, far past the drain's cap (60 s in the unit tests' policy)
SEED = {
    "namespaces": ["shop", "team"],
    "nodes": [{"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"}],
    "deployments": [
        {
            "name": "web",
            "namespace": "shop",
            "replicas": 2,
            "terminationGracePeriodSeconds": LONG_GRACE,
            "shutdownSeconds": LONG_GRACE,  # (an app that takes all of its grace to stop)
        },
        {"name": "api", "namespace": "team", "replicas": 1},
    ],
}


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with drain_server(SEED, namespace_controller_lag_seconds=0) as kube:
        with kube.api_client() as admin:  # cordoned: no replacement of an evicted pod lands on it
            CoreV1Api(admin).patch_node(NODE, {"spec": {"unschedulable": True}})
        yield kube


@pytest.fixture
def cluster(server: KubeServer) -> Iterator[KubeCluster]:
    with drain_cluster(server) as adapter:
        yield adapter


def graces(server: KubeServer, namespace: str) -> list[int | None]:
    return [pod["metadata"].get("deletionGracePeriodSeconds") for pod in server.objects("pods", namespace)]


def deleted_by_its_controller(server: KubeServer, namespace: str) -> None:
    """Wait (a few seconds at most) for the namespace controller to delete the namespace's pods."""
    deadline = time.monotonic() + 10
    while graces(server, namespace) != [LONG_GRACE, LONG_GRACE]:
        assert time.monotonic() < deadline, (
            f"not deleted by the namespace controller: {graces(server, namespace)}"
        )
        time.sleep(0.05)


def test_pods_the_namespace_controller_deletes_with_a_longer_grace_are_shortened_to_the_cap(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a node whose pods of a namespace being deleted are being deleted by its controller, with their grace
    delete_namespace(server, "shop")
    deleted_by_its_controller(server, "shop")
    metrics = FakeMetrics()
    step = evict_step(cluster, NODE, INSTANCE, metrics=metrics, events=FakeEvents())

    # When the drain asks the node's pods to leave
    first = step(draining(), T0)

    # Then their deletion is shortened to the drain's cap, as an eviction shortens another's deletion elsewhere
    assert graces(server, "shop") == [60, 60]
    # without an alarm, and the other namespace's pod evicted as any
    assert "EvictionErrors" not in metrics.counts
    assert first.changes["pods_evicted"] == 1
    assert first.again
