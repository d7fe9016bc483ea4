"""A real kubectl against the sandbox: get, patch, cordon, uncordon, drain under a PodDisruptionBudget."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.kubeconfig import write_kubeconfig

from .conftest import Kube, is_ready, node_name, nodes_seed, pods_of

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


def test_get_nodes_shows_cordoned_nodes_as_scheduling_disabled(server: KubeServer, kubectl: Kubectl) -> None:
    server.seed({"nodes": nodes_seed(2)})
    kubectl("cordon", node_name(0, 10))
    lines = kubectl("get", "nodes", "--no-headers").stdout.splitlines()
    status = {line.split()[0]: line.split()[1] for line in lines}
    assert status == {node_name(0, 10): "Ready,SchedulingDisabled", node_name(1, 10): "Ready"}
    assert server.get_object("nodes", node_name(0, 10))["spec"]["unschedulable"] is True  # type: ignore[index]
    kubectl("uncordon", node_name(0, 10))
    assert "unschedulable" not in server.get_object("nodes", node_name(0, 10))["spec"]  # type: ignore[index]


def test_get_pods_wide_lists_every_namespace_with_node_and_phase(
    server: KubeServer, kubectl: Kubectl
) -> None:
    server.seed(
        {"nodes": nodes_seed(2), "deployments": [{"name": "web", "namespace": "shop", "replicas": 2}]}
    )
    server.settle()
    rows = [
        line.split()
        for line in kubectl("get", "pods", "-A", "-o", "wide", "--no-headers").stdout.splitlines()
    ]
    # NAMESPACE NAME READY STATUS RESTARTS AGE IP NODE
    assert sorted((r[0], r[2], r[3], r[7]) for r in rows) == [
        ("shop", "1/1", "Running", node_name(0, 10)),
        ("shop", "1/1", "Running", node_name(1, 10)),
    ]


def test_kubectl_patch_in_all_three_patch_types(server: KubeServer, kubectl: Kubectl) -> None:
    server.seed({"nodes": nodes_seed(1)})
    node = node_name(0, 10)
    kubectl("patch", "node", node, "-p", '{"metadata":{"labels":{"strategic":"yes"}}}')
    kubectl("patch", "node", node, "--type=merge", "-p", '{"metadata":{"annotations":{"merge":"yes"}}}')
    kubectl(
        "patch",
        "node",
        node,
        "--type=json",
        "-p",
        '[{"op":"add","path":"/metadata/labels/json","value":"yes"}]',
    )
    meta = server.get_object("nodes", node)["metadata"]  # type: ignore[index]
    assert (meta["labels"]["strategic"], meta["annotations"]["merge"], meta["labels"]["json"]) == (
        "yes",
        "yes",
        "yes",
    )
    counts = server.counters()
    assert counts[("patch", "nodes")] == 3


def test_kubectl_create_and_apply_from_a_manifest(
    server: KubeServer, kubectl: Kubectl, kube: Kube, tmp_path: Path
) -> None:
    manifest = tmp_path / "budget.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: budget, namespace: default}\ndata: {a: '1'}\n"
    )
    kubectl("create", "-f", str(manifest))
    manifest.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: budget, namespace: default}\ndata: {a: '2'}\n"
    )
    kubectl("apply", "-f", str(manifest))
    assert kube.core.read_namespaced_config_map("budget", "default").data == {"a": "2"}


def test_kubectl_with_a_token_that_is_not_of_the_eks_form_is_unauthorized(
    server: KubeServer, kubectl: Kubectl, tmp_path: Path
) -> None:
    static = write_kubeconfig(tmp_path / "static", server.url, "static-admin-token", ca_pem=server.ca_pem)
    result = kubectl("get", "nodes", check=False, config=static)
    assert result.returncode != 0
    assert "You must be logged in to the server" in result.stderr


def test_drain_waits_on_the_disruption_budget_and_finishes_once_replacements_are_ready(
    server: KubeServer, kubectl: Kubectl, kube: Kube
) -> None:
    # Given a node running both web pods (budget: 1 may be unavailable), a worker with scratch space,
    # a daemon pod and a mirror pod; then two empty nodes join
    drained = node_name(0, 10)
    server.seed(
        {
            "nodes": nodes_seed(1),
            "deployments": [
                {"name": "web", "namespace": "shop", "replicas": 2, "pdb": {"maxUnavailable": 1}},
                {"name": "worker", "namespace": "shop", "replicas": 1, "emptyDir": True},
            ],
            "daemonSets": [{"name": "agent", "namespace": "kube-system"}],
        }
    )
    server.add_static_pod(drained, "node-probe")
    server.settle()
    for i in (1, 2):
        server.add_node(node_name(i, 10), instance_id=f"i-0join{i}", zone=f"eu-west-1{'abc'[i]}")
    server.settle()
    old_web = {p["metadata"]["name"] for p in pods_of(server, "shop", "web")}
    server.reset_history()

    # When kubectl drains the node
    result = kubectl("drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=60s")

    # Then the second web eviction was refused until the first replacement was Ready, and the drain ended
    assert f"node/{drained} drained" in result.stdout
    assert VIOLATION in result.stderr
    history = server.history()
    web_evictions = [e for e in history if e.resource == "pods/eviction" and e.name in old_web]
    assert len(web_evictions) == 2
    first_replacement_ready = min(
        e.time
        for e in history
        if e.resource == "pods/status"
        and e.name.startswith("web-")
        and e.name not in old_web
        and is_ready(e.object)
    )
    assert web_evictions[0].time < first_replacement_ready < web_evictions[1].time
    assert server.counters()[("create", "pods/eviction")] >= 4  # web twice, its retry, worker
    # Every workload pod runs elsewhere; the daemon and mirror pods stay
    remaining = sorted(
        p.metadata.name.split("-")[0]
        for p in kube.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={drained}").items
    )
    assert remaining == ["agent", "node"]
    server.settle()  # the last replacement (the worker's, under no budget) may still be starting
    moved = pods_of(server, "shop", "web") + pods_of(server, "shop", "worker")
    assert len(moved) == 3
    assert all(is_ready(p) and p["spec"]["nodeName"] != drained for p in moved)
    assert kube.core.read_node(drained).spec.unschedulable is True
