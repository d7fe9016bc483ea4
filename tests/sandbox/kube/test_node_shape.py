"""A Node as an EKS node's kubelet reports it: its readiness and pressures, its kubelet's port, the images on
it; so that lists and metadata-only lists of nodes are measured on objects of a real node's make-up."""

from __future__ import annotations

from nodecycle_sandbox.kube import KubeServer

from .conftest import Kube, node_name, nodes_seed, wait_until


def _conditions(server: KubeServer, node: str) -> dict[str, str]:
    found = server.get_object("nodes", node) or {}
    return {c["type"]: c["status"] for c in found["status"]["conditions"]}


def test_a_node_carries_what_its_kubelet_reports(server: KubeServer, kube: Kube) -> None:
    server.seed({"nodes": nodes_seed(1)})
    node = kube.core.read_node(node_name(0, 10))

    assert {c.type: c.status for c in node.status.conditions} == {
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
        "Ready": "True",
    }
    assert node.status.daemon_endpoints.kubelet_endpoint.port == 10250
    assert len(node.status.images) >= 10
    assert all(len(image.names) == 2 and image.size_bytes > 0 for image in node.status.images)


def test_a_lost_kubelet_leaves_every_condition_unknown_and_its_return_posts_them_again(
    server: KubeServer,
) -> None:
    server.seed({"nodes": nodes_seed(1)})
    node = node_name(0, 10)

    server.kill_kubelet(node, grace_seconds=0)
    lost = wait_until(
        lambda: _conditions(server, node) if _conditions(server, node)["Ready"] == "Unknown" else None,
        what="the node to turn Unknown",
    )
    server.revive_kubelet(node)

    assert set(lost.values()) == {"Unknown"}
    assert _conditions(server, node) == {
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
        "Ready": "True",
    }
