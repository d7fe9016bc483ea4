"""What a real cluster leaves behind when a node outlives its kubelet or its instance: the pods of a deleted
node linger until the pod garbage collector's quarantine is over; the pods of a node tainted unreachable are
deleted by the taint manager once their toleration is over, and then stay Terminating with no kubelet to end
them; an eviction there is accepted and changes nothing more."""

from __future__ import annotations

from typing import Any

from nodecycle_sandbox.kube import KubeServer

from .conftest import connect, is_ready, node_name, nodes_seed, pods_of, wait_until

UNREACHABLE = "node.kubernetes.io/unreachable"


def _on(server: KubeServer, node: str, namespace: str = "shop") -> list[dict[str, Any]]:
    return [p for p in server.objects("pods", namespace) if p["spec"].get("nodeName") == node]


def _terminating(pod: dict[str, Any] | None) -> bool:
    return pod is not None and bool(pod["metadata"].get("deletionTimestamp"))


def _eviction(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}


def test_the_pods_of_a_deleted_node_linger_until_the_pod_gc_quarantine_is_over() -> None:
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05, pod_gc_quarantine_seconds=600) as server:
        kube = connect(server)
        # Given a Deployment of 3 replicas over 3 nodes, one of its pods being deleted
        server.seed(
            {"nodes": nodes_seed(3), "deployments": [{"name": "web", "namespace": "shop", "replicas": 3}]}
        )
        server.settle()
        gone = node_name(0, 10)
        (running,) = _on(server, gone)

        # When the node is deleted (its instance is gone)
        assert server.remove_node(gone) is True

        # Then its pod stays bound to it, Running, and is not replaced while it is there
        assert [p["metadata"]["name"] for p in _on(server, gone)] == [running["metadata"]["name"]]
        assert len(pods_of(server, "shop", "web")) == 3

        # When it is evicted, Then the eviction is accepted, the pod stays Terminating (no kubelet ends it) and
        # the ReplicaSet replaces it elsewhere
        name = running["metadata"]["name"]
        _, status, _ = kube.core.create_namespaced_pod_eviction_with_http_info(
            name, "shop", _eviction(name, "shop")
        )
        assert status == 201
        wait_until(
            lambda: (
                sum(1 for p in pods_of(server, "shop", "web") if is_ready(p) and not _terminating(p)) == 3
            ),
            what="a replacement",
        )
        assert _terminating(server.get_object("pods", name, "shop"))

        # When podgc's quarantine is over, Then it force-deletes the orphan
        server.pod_gc_quarantine_seconds = 0
        wait_until(lambda: not _on(server, gone), what="the orphan collected")
        assert len(pods_of(server, "shop", "web")) == 3
        kube.api_client.close()


def test_the_taint_manager_deletes_the_pods_of_an_unreachable_node_once_their_toleration_is_over() -> None:
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05, unreachable_toleration_seconds=0.3) as server:
        kube = connect(server)
        # Given a node with a Deployment's pod (no toleration of its own: the default, 0.3 s here), a pod that
        # tolerates the unreachable taint for ever and a DaemonSet's pod (which tolerates it for ever too)
        server.seed(
            {
                "nodes": nodes_seed(2),
                "deployments": [{"name": "web", "namespace": "shop", "replicas": 2}],
                "daemonSets": [{"name": "agent", "namespace": "shop"}],
            }
        )
        node = node_name(0, 10)
        forever = {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute"}
        kube.core.create_namespaced_pod(
            "shop",
            {
                "metadata": {"name": "patient"},
                "spec": {
                    "nodeName": node,
                    "tolerations": [forever],
                    "containers": [{"name": "c", "image": "x"}],
                },
            },
        )
        server.settle()
        web = next(p for p in _on(server, node) if p["metadata"]["name"].startswith("web-"))

        # When its kubelet is lost
        server.kill_kubelet(node, grace_seconds=0)

        # Then once its toleration is over, the Deployment's pod is deleted, stays Terminating (no kubelet to
        # stop it) and is replaced elsewhere; the pods that tolerate the taint for ever stay
        wait_until(
            lambda: _terminating(server.get_object("pods", web["metadata"]["name"], "shop")),
            what="the taint manager's deletion",
        )
        wait_until(
            lambda: (
                any(p["spec"]["nodeName"] != node and is_ready(p) for p in pods_of(server, "shop", "web"))
                and sum(1 for p in pods_of(server, "shop", "web") if not _terminating(p)) == 2
            ),
            what="the replacement",
        )
        assert _terminating(server.get_object("pods", web["metadata"]["name"], "shop"))
        kept = {p["metadata"]["name"] for p in _on(server, node) if not _terminating(p)}
        assert "patient" in kept
        assert any(name.startswith("agent-") for name in kept)

        # When the node is deleted, Then podgc force-deletes all its pods (quarantine 0 here)
        server.remove_node(node)
        wait_until(lambda: not _on(server, node), what="the pods collected")
        kube.api_client.close()
