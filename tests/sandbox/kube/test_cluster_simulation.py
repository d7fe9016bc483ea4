"""The simulated kubelets and controllers a drain depends on: graceful termination, replacement pods,
scheduling, DaemonSets, mirror pods, node readiness and node removal."""

from __future__ import annotations

import time
from typing import Any

from nodecycle_sandbox.kube import SHUTDOWN_ANNOTATION, ZONE_LABEL, KubeServer

from .conftest import Kube, is_ready, node_name, nodes_seed, pods_of, wait_until


def _bare_pod(name: str, node: str, *, shutdown: float | None = None, grace: int = 30) -> dict[str, Any]:
    annotations = {} if shutdown is None else {SHUTDOWN_ANNOTATION: str(shutdown)}
    return {
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "c", "image": "x"}],
        },
    }


def _running(server: KubeServer, name: str, namespace: str = "default") -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        pod = server.get_object("pods", name, namespace)
        return pod if pod is not None and is_ready(pod) else None

    return wait_until(ready, what=f"{name} Ready")


def _gone_after(server: KubeServer, name: str, started: float, timeout: float = 5.0) -> float:
    wait_until(
        lambda: server.get_object("pods", name, "default") is None, timeout=timeout, what=f"{name} gone"
    )
    return time.monotonic() - started


def test_deleted_pod_stays_terminating_for_its_shutdown_time_then_disappears(
    server: KubeServer, kube: Kube
) -> None:
    # Given a running pod that takes 0.6 s to stop, with 30 s of grace
    server.seed({"nodes": nodes_seed(1)})
    kube.core.create_namespaced_pod("default", _bare_pod("slow", node_name(0, 10), shutdown=0.6))
    _running(server, "slow")
    # When it is deleted
    started = time.monotonic()
    # (the kubelet held back meanwhile: under load the delete and the read can outlast its 0.6 s shutdown,
    # and a read 0.3 s after the delete found it gone)
    with server.paused_controllers():
        deleted = kube.core.delete_namespaced_pod("slow", "default")
        # Then the API shows it terminating with its grace period until the shutdown is over
        assert deleted.metadata.deletion_timestamp is not None
        assert deleted.metadata.deletion_grace_period_seconds == 30
        assert kube.core.read_namespaced_pod("slow", "default").metadata.deletion_timestamp is not None
    assert 0.55 <= _gone_after(server, "slow", started) < 2.0


def test_shutdown_is_cut_short_by_the_grace_period(server: KubeServer, kube: Kube) -> None:
    server.seed({"nodes": nodes_seed(1)})
    kube.core.create_namespaced_pod("default", _bare_pod("stubborn", node_name(0, 10), shutdown=60))
    _running(server, "stubborn")
    started = time.monotonic()
    kube.core.delete_namespaced_pod("stubborn", "default", grace_period_seconds=1)
    assert 0.9 <= _gone_after(server, "stubborn", started) < 2.5


def test_grace_period_zero_and_unscheduled_pods_are_deleted_at_once(server: KubeServer, kube: Kube) -> None:
    server.seed({"nodes": nodes_seed(1)})
    kube.core.create_namespaced_pod("default", _bare_pod("forced", node_name(0, 10), shutdown=60))
    _running(server, "forced")
    kube.core.delete_namespaced_pod("forced", "default", body={"gracePeriodSeconds": 0})
    assert server.get_object("pods", "forced", "default") is None
    kube.core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "nowhere"},
            "spec": {"containers": [{"name": "c", "image": "x"}], "nodeSelector": {"none": "x"}},
        },
    )
    kube.core.delete_namespaced_pod("nowhere", "default")
    assert server.get_object("pods", "nowhere", "default") is None


def test_a_delete_with_a_body_takes_its_options_from_the_body_alone(server: KubeServer, kube: Kube) -> None:
    # kube-apiserver's DeleteResource (k8s.io/apiserver handlers/delete.go) decodes the DeleteOptions from the body
    # when the request has one, and reads the query's parameters only when it has none: a ?gracePeriodSeconds=0
    # beside a body that names no grace is no force delete; the pod is deleted with its own grace. (A client that
    # sends both, as the official client's delete_namespaced_pod does with a body, must put the grace in the body.)
    server.seed({"nodes": nodes_seed(1)})
    kube.core.create_namespaced_pod("default", _bare_pod("kept", node_name(0, 10), shutdown=60))
    pod = _running(server, "kept")
    kube.core.delete_namespaced_pod(
        "kept", "default", grace_period_seconds=0, body={"preconditions": {"uid": pod["metadata"]["uid"]}}
    )
    left = server.get_object("pods", "kept", "default")
    assert left is not None
    assert left["metadata"]["deletionGracePeriodSeconds"] == 30
    # Without a body, the query's grace is the delete's
    kube.core.delete_namespaced_pod("kept", "default", grace_period_seconds=0)
    assert server.get_object("pods", "kept", "default") is None


def test_evicted_replicaset_pod_is_recreated_on_another_schedulable_node(
    server: KubeServer, kube: Kube
) -> None:
    # Given one web pod on each of 3 nodes
    server.seed(
        {"nodes": nodes_seed(3), "deployments": [{"name": "web", "namespace": "shop", "replicas": 3}]}
    )
    server.settle()
    victim = pods_of(server, "shop", "web")[0]
    node = victim["spec"]["nodeName"]
    # When its node is cordoned and the pod deleted
    kube.core.patch_node(node, {"spec": {"unschedulable": True}})
    kube.core.delete_namespaced_pod(victim["metadata"]["name"], "shop")
    # Then a replacement with a new name and uid runs elsewhere, Ready after the start delay
    server.settle()
    pods = pods_of(server, "shop", "web")
    assert len(pods) == 3
    assert all(is_ready(p) for p in pods)
    assert victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods}
    assert node not in {p["spec"]["nodeName"] for p in pods}
    replacement = next(
        p
        for p in pods
        if p["metadata"]["creationTimestamp"] >= victim["metadata"]["creationTimestamp"]
        and p["metadata"]["name"] != victim["metadata"]["name"]
    )
    assert replacement["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"


def test_replacement_waits_pending_until_a_node_has_room(server: KubeServer, kube: Kube) -> None:
    # Given two full nodes (capacity 2 each) and 4 pods
    server.seed(
        {
            "nodes": nodes_seed(2, pods_capacity=2),
            "deployments": [{"name": "web", "namespace": "shop", "replicas": 4}],
        }
    )
    server.settle()
    # When one node is cordoned and a pod of it deleted
    victim = pods_of(server, "shop", "web")[0]
    kube.core.patch_node(victim["spec"]["nodeName"], {"spec": {"unschedulable": True}})
    kube.core.delete_namespaced_pod(victim["metadata"]["name"], "shop")
    server.settle()
    # Then its replacement is Pending, unscheduled, until a node joins
    pending = kube.core.list_namespaced_pod("shop", field_selector="status.phase=Pending").items
    assert len(pending) == 1
    assert pending[0].spec.node_name is None
    assert [(c.type, c.reason) for c in pending[0].status.conditions] == [("PodScheduled", "Unschedulable")]
    server.add_node(node_name(2, 10), instance_id="i-0new", zone="eu-west-1c")
    server.settle()
    scheduled = kube.core.read_namespaced_pod(pending[0].metadata.name, "shop")
    assert (scheduled.spec.node_name, scheduled.status.phase) == (node_name(2, 10), "Running")


UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def test_a_cordoned_node_is_tainted_unschedulable_until_it_is_uncordoned(
    server: KubeServer, kube: Kube
) -> None:
    # kube-controller-manager's node lifecycle controller (doNoScheduleTaintingPass, TaintNodesByCondition) keeps a
    # node.kubernetes.io/unschedulable:NoSchedule taint on every node whose spec.unschedulable is true, and takes it
    # off once it is not: a write of its own to the node after each cordon and uncordon (a new resourceVersion a
    # client that cordoned meets), and the taint the scheduler's TaintToleration filter then judges
    server.seed({"nodes": nodes_seed(1)})
    server.settle()
    node = node_name(0, 10)
    cordoned = kube.core.patch_node(node, {"spec": {"unschedulable": True}})
    server.settle()
    tainted = kube.core.read_node(node)
    assert [(t.key, t.effect) for t in tainted.spec.taints or []] == [(UNSCHEDULABLE_TAINT, "NoSchedule")]
    assert tainted.spec.taints[0].time_added is not None
    assert tainted.metadata.resource_version != cordoned.metadata.resource_version
    kube.core.patch_node(node, {"spec": {"unschedulable": None}})
    server.settle()
    assert not kube.core.read_node(node).spec.taints


def test_a_pod_that_tolerates_the_unschedulable_taint_is_scheduled_on_a_cordoned_node(
    server: KubeServer, kube: Kube
) -> None:
    # The scheduler's NodeUnschedulable filter lets a pod that tolerates node.kubernetes.io/unschedulable:NoSchedule
    # onto a node with spec.unschedulable (a toleration of every taint, {operator: Exists}, as some agents and
    # operators ship, included): a cordon keeps every other pod off, not those. Given one pod of such a Deployment on
    # each of two nodes with room for one pod each
    template = {
        "metadata": {"labels": {"app": "agent"}},
        "spec": {"containers": [{"name": "agent", "image": "x"}], "tolerations": [{"operator": "Exists"}]},
    }
    server.seed(
        {
            "nodes": nodes_seed(2, pods_capacity=1),
            "deployments": [{"name": "agent", "namespace": "ops", "replicas": 2, "template": template}],
        }
    )
    server.settle()
    victim = pods_of(server, "ops", "agent")[0]
    node = victim["spec"]["nodeName"]
    # When its node is cordoned and the pod deleted
    kube.core.patch_node(node, {"spec": {"unschedulable": True}})
    kube.core.delete_namespaced_pod(victim["metadata"]["name"], "ops")
    server.settle()
    # Then its replacement runs on the cordoned node, the one with room
    pods = pods_of(server, "ops", "agent")
    assert len(pods) == 2
    assert all(is_ready(p) for p in pods)
    assert victim["metadata"]["uid"] not in {p["metadata"]["uid"] for p in pods}
    assert node in {p["spec"]["nodeName"] for p in pods}


def test_scheduler_spreads_replicas_over_zones(server: KubeServer) -> None:
    server.seed(
        {"nodes": nodes_seed(6), "deployments": [{"name": "web", "namespace": "shop", "replicas": 6}]}
    )
    server.settle()
    zones = {n["metadata"]["name"]: n["metadata"]["labels"][ZONE_LABEL] for n in server.objects("nodes")}
    per_zone = [zones[p["spec"]["nodeName"]] for p in pods_of(server, "shop", "web")]
    assert sorted(per_zone.count(z) for z in set(per_zone)) == [2, 2, 2]
    assert len({p["spec"]["nodeName"] for p in pods_of(server, "shop", "web")}) == 6


def test_daemonset_runs_one_pod_per_node_including_new_and_cordoned_nodes(
    server: KubeServer, kube: Kube
) -> None:
    server.seed({"nodes": nodes_seed(2), "daemonSets": [{"name": "agent", "namespace": "kube-system"}]})
    server.settle()
    kube.core.patch_node(node_name(0, 10), {"spec": {"unschedulable": True}})
    server.add_node(node_name(2, 10), instance_id="i-0new", zone="eu-west-1c")
    server.settle()
    pods = pods_of(server, "kube-system", "agent")
    assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(
        n["metadata"]["name"] for n in server.objects("nodes")
    )
    assert all(p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet" for p in pods)
    # A deleted daemon pod comes back on the same node.
    on_first = next(p for p in pods if p["spec"]["nodeName"] == node_name(0, 10))
    kube.core.delete_namespaced_pod(on_first["metadata"]["name"], "kube-system")
    server.settle()
    again = [p for p in pods_of(server, "kube-system", "agent") if p["spec"]["nodeName"] == node_name(0, 10)]
    assert len(again) == 1
    assert again[0]["metadata"]["name"] != on_first["metadata"]["name"]
    status = kube.apps.read_namespaced_daemon_set("agent", "kube-system").status
    assert (status.desired_number_scheduled, status.number_ready) == (3, 3)


def test_static_pod_has_a_mirror_pod_that_comes_back_when_deleted(server: KubeServer, kube: Kube) -> None:
    server.seed({"nodes": nodes_seed(1)})
    server.add_static_pod(node_name(0, 10), "node-probe")
    server.settle()
    mirror_name = f"node-probe-{node_name(0, 10)}"
    mirror = kube.core.read_namespaced_pod(mirror_name, "kube-system")
    assert "kubernetes.io/config.mirror" in mirror.metadata.annotations
    assert [(r.kind, r.name) for r in mirror.metadata.owner_references] == [("Node", node_name(0, 10))]
    kube.core.delete_namespaced_pod(mirror_name, "kube-system")
    server.settle()
    assert kube.core.read_namespaced_pod(mirror_name, "kube-system").metadata.uid != mirror.metadata.uid


def test_a_node_its_kubelet_reports_not_ready_makes_its_pods_unready_and_still_ends_their_termination(
    server: KubeServer, kube: Kube
) -> None:
    server.seed({"nodes": nodes_seed(1)})
    kube.core.create_namespaced_pod("default", _bare_pod("p", node_name(0, 10)))
    _running(server, "p")
    # When the kubelet reports the node NotReady (its container runtime's network not ready), its pod is unready
    server.set_node_ready(node_name(0, 10), False)
    wait_until(lambda: not is_ready(server.get_object("pods", "p", "default") or {}), what="pod unready")
    assert [
        c.status for c in kube.core.read_node(node_name(0, 10)).status.conditions if c.type == "Ready"
    ] == ["False"]
    # and a graceful delete still ends: the kubelet is there to stop the pod (only a lost one never does)
    kube.core.delete_namespaced_pod("p", "default")
    wait_until(lambda: server.get_object("pods", "p", "default") is None, what="pod gone")


def test_node_registered_with_ready_after_turns_ready_later(server: KubeServer, kube: Kube) -> None:
    server.add_node(node_name(0, 10), instance_id="i-0late", zone="eu-west-1a", ready_after=0.3)

    def ready() -> list[str]:
        return [
            c.status for c in kube.core.read_node(node_name(0, 10)).status.conditions if c.type == "Ready"
        ]

    assert ready() == ["False"]
    wait_until(lambda: ready() == ["True"], what="node Ready")
    assert server.node_for_instance("i-0late") == node_name(0, 10)
    assert server.node_for_instance("i-0other") is None


def test_removed_node_takes_its_pods_and_controllers_recreate_them_elsewhere(
    server: KubeServer, kube: Kube
) -> None:
    server.pod_gc_quarantine_seconds = 0  # (podgc's 40 s quarantine: over at once here)
    server.seed(
        {
            "nodes": nodes_seed(3),
            "deployments": [{"name": "web", "namespace": "shop", "replicas": 3}],
            "daemonSets": [{"name": "agent", "namespace": "kube-system"}],
        }
    )
    server.settle()
    gone = node_name(0, 10)
    assert server.remove_node(gone) is True
    assert [p for p in server.objects("pods") if p["spec"].get("nodeName") == gone] == []
    server.settle()
    assert len(pods_of(server, "shop", "web")) == 3
    assert all(is_ready(p) and p["spec"]["nodeName"] != gone for p in pods_of(server, "shop", "web"))
    assert len(pods_of(server, "kube-system", "agent")) == 2
    assert server.remove_node(gone) is False  # an instance whose node already left


def test_scaling_and_template_changes_of_a_deployment(server: KubeServer, kube: Kube) -> None:
    server.seed(
        {"nodes": nodes_seed(3), "deployments": [{"name": "web", "namespace": "shop", "replicas": 2}]}
    )
    server.settle()
    kube.apps.patch_namespaced_deployment("web", "shop", {"spec": {"replicas": 4}})
    server.settle()
    assert len(pods_of(server, "shop", "web")) == 4
    assert kube.apps.read_namespaced_deployment("web", "shop").status.ready_replicas == 4
    patch = {
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{"name": "app", "image": "web:2"}]}}}
    }
    kube.apps.patch_namespaced_deployment("web", "shop", patch)
    server.settle()
    pods = pods_of(server, "shop", "web")
    assert [p["spec"]["containers"][0]["image"] for p in pods] == ["web:2"]
    replicas = {
        rs.metadata.name: rs.spec.replicas for rs in kube.apps.list_namespaced_replica_set("shop").items
    }
    assert sorted(replicas.values()) == [0, 1]


def test_deleting_a_deployment_collects_its_replicasets_and_pods(server: KubeServer, kube: Kube) -> None:
    server.seed(
        {"nodes": nodes_seed(2), "deployments": [{"name": "web", "namespace": "shop", "replicas": 2}]}
    )
    server.settle()
    kube.apps.delete_namespaced_deployment("web", "shop")
    server.settle()
    assert server.objects("replicasets", "shop") == []
    assert server.objects("pods", "shop") == []
