"""A namespace the drain found being deleted, gone and created again under the same name while the drain runs (a
GitOps controller recreating what it manages): its pods are new ones, in a namespace that takes evictions again.
kube-apiserver's NamespaceLifecycle admission takes no create in a namespace being deleted, so a pod created after
the drain found it so is of the namespace created again."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import cast

from kubernetes.client import CoreV1Api, V1Namespace, V1Pod

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.pods import FIRST_LISTED
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.test_kube_drain_ending_namespace import (
    NODE,
    cluster,
    delete_namespace,
    draining,
    evict,
    server,
)
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents

__all__ = ["cluster", "server"]  # (the fixtures)


def _wait(what: str, done: object) -> None:
    for _ in range(200):
        if callable(done) and done():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _cordon_again(server: KubeServer) -> None:
    """Uncordon the node, then cordon it again, each once its taint says so (its timeAdded stamped anew)."""

    def taint() -> dict[str, object] | None:
        node = server.get_object("nodes", NODE) or {}
        taints = (node.get("spec") or {}).get("taints") or []
        return next((t for t in taints if t.get("key") == "node.kubernetes.io/unschedulable"), None)

    with server.api_client() as admin:
        CoreV1Api(admin).patch_node(NODE, {"spec": {"unschedulable": False}})
        _wait("the taint lifted", lambda: taint() is None)
        time.sleep(1.1)  # (creationTimestamp and timeAdded are whole seconds)
        CoreV1Api(admin).patch_node(NODE, {"spec": {"unschedulable": True}})
        _wait("the taint back", lambda: taint() is not None)


def test_a_pod_of_a_namespace_deleted_and_created_again_during_the_drain_is_evicted(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose first pass found namespace shop being deleted (its pods not asked any more)
    delete_namespace(server, "shop")
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict(cluster, metrics, events)
    first = step(draining(), T0)
    assert "shop" in first.changes["extra"]["ending_namespaces"]

    # When the namespace controller is done with it, it is created again, a pod of it lands on the node while
    # someone had uncordoned it, and the node is cordoned again (the drain's pods are those there then)
    server.namespace_controller_lag_seconds = 0
    _wait("the namespace gone", lambda: server.get_object("namespaces", "shop") is None)
    time.sleep(
        1.1
    )  # (creationTimestamp is whole seconds: the new pod a second later than the namespace's last)
    with server.api_client() as admin:
        api = CoreV1Api(admin)
        # (as JSON: the client sends a dict as it is)
        api.create_namespace(cast("V1Namespace", {"metadata": {"name": "shop"}}))
        new_pod = {
            "metadata": {"name": "solo", "namespace": "shop"},
            "spec": {"nodeName": NODE, "containers": [{"name": "app", "image": "nginx"}]},
        }
        api.create_namespaced_pod("shop", cast("V1Pod", new_pod))
    time.sleep(1.1)
    _cordon_again(server)
    extra = {k: v for k, v in first.changes["extra"].items() if k != FIRST_LISTED}
    second = step(draining(extra=extra), T0 + timedelta(seconds=5))

    # Then the new namespace's pod is asked to leave: evicted, not waited for until the drain's timeout
    solo = server.get_object("pods", "solo", "shop")
    assert solo is None or solo["metadata"].get("deletionTimestamp"), second
