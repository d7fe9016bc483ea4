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
    with KubeServer(
        tick_seconds=0.02,
        pod_start_seconds=0.05,
        unreachable_toleration_seconds=0.3,
        pod_gc_quarantine_seconds=0,  # (podgc's 40 s quarantine: over at once here)
    ) as server:
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


def test_the_node_of_a_terminated_instance_lingers_without_its_kubelet_until_the_cloud_provider_deletes_it() -> (
    None
):
    with KubeServer(
        tick_seconds=0.02,
        pod_start_seconds=0.05,
        node_monitor_grace_seconds=0.2,
        pod_gc_quarantine_seconds=0,  # (podgc's 40 s quarantine: over at once here)
    ) as server:
        kube = connect(server)
        # Given a node running a Deployment's pods
        server.seed(
            {"nodes": nodes_seed(1), "deployments": [{"name": "web", "namespace": "shop", "replicas": 2}]}
        )
        server.settle()
        node = node_name(0, 10)
        pods = [p["metadata"]["name"] for p in _on(server, node)]

        # When its instance is terminated, and one of its pods is deleted
        assert server.instance_terminated(node)
        kube.core.delete_namespaced_pod(pods[0], "shop", grace_period_seconds=1)

        # Then the node turns Unknown, tainted unreachable (not shut down), and the pod stays Terminating
        wait_until(lambda: _unreachable(server, node), what="the node tainted unreachable")
        assert _terminating(server.get_object("pods", pods[0], "shop"))
        assert not server.instance_terminated("no-such-node")

        # When the cloud provider deletes the node, Then its pods go with it (podgc, quarantine 0 here)
        server.remove_node(node)
        wait_until(lambda: not _on(server, node), what="the pods collected")
        kube.api_client.close()


def _unreachable(server: KubeServer, node: str) -> bool:
    found = server.get_object("nodes", node) or {}
    keys = {t["key"] for t in found["spec"].get("taints") or []}
    return keys == {UNREACHABLE}


def test_settling_does_not_wait_for_what_a_lost_kubelet_leads_to_minutes_later() -> None:
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as server:
        # Given two nodes with a Deployment's pods
        server.seed(
            {"nodes": nodes_seed(2), "deployments": [{"name": "web", "namespace": "shop", "replicas": 4}]}
        )
        server.settle()
        lingering, unreachable = node_name(0, 10), node_name(1, 10)

        # When the instance of one is terminated (its node Unknown only after the 40 s node monitor grace), and
        # the kubelet of the other is lost and noticed at once (its pods deleted after the 300 s toleration)
        assert server.instance_terminated(lingering)
        server.kill_kubelet(unreachable, grace_seconds=0)
        wait_until(lambda: _unreachable(server, unreachable), what="the node tainted unreachable")

        # Then the cluster is settled at once, with neither timer waited for: the first node still Ready, the
        # pods of the other neither deleted nor replaced
        server.settle(timeout=2)
        assert not _unreachable(server, lingering)
        assert len(_on(server, unreachable)) == 2
        assert not any(_terminating(p) for p in _on(server, unreachable))


def test_podgc_marks_an_orphan_failed_with_its_disruption_condition_before_it_force_deletes_it() -> None:
    # (kube-controller-manager's podgc, gcOrphaned: markFailedAndDeletePodWithCondition patches the pod's status to
    # phase Failed with the DisruptionTarget condition, reason DeletionByPodGC, then deletes it with grace 0)
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05, pod_gc_quarantine_seconds=600) as server:
        kube = connect(server)
        # Given a pod of a Deployment whose finalizer keeps it in the API once deleted, on a node that is deleted
        server.seed(
            {"nodes": nodes_seed(3), "deployments": [{"name": "web", "namespace": "shop", "replicas": 3}]}
        )
        server.settle()
        gone = node_name(0, 10)
        (orphan,) = _on(server, gone)
        name = orphan["metadata"]["name"]
        kube.core.patch_namespaced_pod(name, "shop", {"metadata": {"finalizers": ["example.com/keep"]}})
        assert server.remove_node(gone) is True

        # When podgc's quarantine is over
        server.pod_gc_quarantine_seconds = 0
        wait_until(lambda: _terminating(server.get_object("pods", name, "shop")), what="the orphan collected")

        # Then the pod was marked Failed, with the condition that says podgc disrupted it, before its deletion
        pod = server.get_object("pods", name, "shop")
        assert pod is not None
        assert pod["status"]["phase"] == "Failed"
        (target,) = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        assert (target["status"], target["reason"], target["message"]) == (
            "True",
            "DeletionByPodGC",
            "PodGC: node no longer exists",
        )
        assert pod["metadata"]["deletionGracePeriodSeconds"] == 0
        kube.api_client.close()
