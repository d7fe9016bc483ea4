"""A namespace being deleted, as kube-apiserver and the namespace controller show it: Terminating until the pods in
it have stopped, and every create in it (an eviction, an Event, a ConfigMap) refused by NamespaceLifecycle's
admission with 403 Forbidden and the cause NamespaceTerminating; reads, patches and deletes pass."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer
from tests.sandbox.kube.conftest import Kube, connect, nodes_seed, pods_of, status_of, wait_until

SEED = {"nodes": nodes_seed(1), "deployments": [{"name": "web", "namespace": "shop", "replicas": 2}]}


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as started:
        started.seed(SEED)
        started.settle()
        yield started


@pytest.fixture
def kube(server: KubeServer) -> Iterator[Kube]:
    clients = connect(server)
    yield clients
    clients.api_client.close()


def refusal(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as refused:
        call(*args, **kwargs)
    assert refused.value.status == 403
    return status_of(refused.value)


def event(name: str) -> dict[str, Any]:
    return {
        "metadata": {"generateName": f"{name}.", "namespace": "shop"},
        "involvedObject": {"kind": "Pod", "name": name, "namespace": "shop"},
        "reason": "Test",
        "message": "a test event",
    }


def eviction(name: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": "shop"}}


def test_creates_in_a_namespace_being_deleted_are_refused_with_its_cause_while_its_pods_stop(
    server: KubeServer, kube: Kube
) -> None:
    # Given a namespace with two running pods that take a moment to stop
    server.pod_shutdown_seconds = 0.3
    first, second = sorted(p["metadata"]["name"] for p in pods_of(server, "shop", "web"))

    with server.paused_controllers():  # (their kubelet does not stop them meanwhile)
        # When the namespace is deleted
        kube.core.delete_namespace("shop")

        # Then it is Terminating, its pods being deleted, and an eviction, an Event and a ConfigMap are refused
        assert kube.core.read_namespace("shop").status.phase == "Terminating"
        assert kube.core.read_namespaced_pod(first, "shop").metadata.deletion_timestamp is not None
        evicted = refusal(kube.core.create_namespaced_pod_eviction, first, "shop", eviction(first))
        assert evicted["reason"] == "Forbidden"
        assert evicted["message"] == (
            f'pods "{first}" is forbidden: unable to create new content in namespace shop because it is being '
            "terminated"
        )
        assert evicted["details"]["causes"] == [
            {
                "reason": "NamespaceTerminating",
                "message": "namespace shop is being terminated",
                "field": "metadata.namespace",
            }
        ]
        written = refusal(kube.core.create_namespaced_event, "shop", event(first))
        assert written["message"].startswith(f'events "{first}." is forbidden: unable to create new content')
        created = refusal(
            kube.core.create_namespaced_config_map, "shop", {"metadata": {"name": "x", "namespace": "shop"}}
        )
        assert created["details"]["causes"][0]["reason"] == "NamespaceTerminating"
        # and what is not a create passes: a patch, a delete, a create elsewhere
        kube.core.patch_namespaced_pod(first, "shop", {"metadata": {"labels": {"seen": "yes"}}})
        kube.core.delete_namespaced_pod(second, "shop", grace_period_seconds=0)
        kube.core.create_namespaced_event(
            "default",
            {**event(first), "metadata": {"generateName": "n."}}
            | {"involvedObject": {"kind": "Node", "name": "n"}},
        )

    # And once its pods have stopped, the namespace is gone, none of its pods replaced
    wait_until(lambda: server.get_object("namespaces", "shop") is None, what="the namespace to go")
    assert server.objects("pods", "shop") == []


def test_a_lagging_namespace_controller_leaves_the_pods_running_and_unreplaced_but_refuses_their_eviction(
    server: KubeServer, kube: Kube
) -> None:
    # Given a namespace controller that takes its time
    server.namespace_controller_lag_seconds = 3600
    first, _ = sorted(p["metadata"]["name"] for p in pods_of(server, "shop", "web"))

    # When the namespace is deleted, and one of its pods too
    kube.core.delete_namespace("shop")
    kube.core.delete_namespaced_pod(first, "shop", grace_period_seconds=0)
    server.settle()

    # Then the other pod runs, untouched; its eviction is refused; the deleted one is not replaced
    (running,) = pods_of(server, "shop", "web")
    assert "deletionTimestamp" not in running["metadata"]
    name = running["metadata"]["name"]
    cause = refusal(kube.core.create_namespaced_pod_eviction, name, "shop", eviction(name))["details"][
        "causes"
    ]
    assert cause[0]["reason"] == "NamespaceTerminating"

    # And once the controller gets to it, the namespace and its pod go
    server.namespace_controller_lag_seconds = 0
    wait_until(lambda: server.get_object("namespaces", "shop") is None, what="the namespace to go")
