"""Seeding a cluster from a document: the shipped default seed, YAML and JSON files, and bad seeds."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from nodecycle_sandbox.kube import ZONE_LABEL, KubeServer

from .conftest import Kube, is_ready


def test_default_seed_is_six_ec2_nodes_over_three_zones_with_budgeted_workloads(
    server: KubeServer, kube: Kube
) -> None:
    server.load_default_seed()
    server.settle()
    nodes = kube.core.list_node().items
    assert Counter(n.metadata.labels[ZONE_LABEL] for n in nodes) == {
        "eu-west-1a": 2,
        "eu-west-1b": 2,
        "eu-west-1c": 2,
    }
    for node in nodes:
        zone = node.metadata.labels[ZONE_LABEL]
        assert node.metadata.name.startswith("ip-10-0-")
        assert node.metadata.name.endswith(".eu-west-1.compute.internal")
        instance = node.spec.provider_id.rsplit("/", 1)[1]
        assert node.spec.provider_id == f"aws:///{zone}/{instance}"
        assert server.node_for_instance(instance) == node.metadata.name
        assert [a.address for a in node.status.addresses if a.type == "InternalIP"] == [
            node.metadata.name.split(".")[0].removeprefix("ip-").replace("-", ".")
        ]
    budgets = {
        (p.metadata.namespace, p.metadata.name)
        for p in kube.policy.list_pod_disruption_budget_for_all_namespaces().items
    }
    assert budgets == {("kube-system", "coredns"), ("shop", "web"), ("shop", "api"), ("shop", "worker")}
    pods = server.objects("pods")
    assert all(is_ready(p) for p in pods)
    daemons = [p for p in pods if p["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet"]
    assert len(daemons) == 12  # two DaemonSets on six nodes
    assert len(pods) == 12 + 2 + 6 + 4 + 3


SEED = {
    "namespaces": ["team"],
    "nodes": [
        {
            "privateIp": "10.0.1.5",
            "instanceId": "i-0aaaaaaaaaaaaaaa1",
            "zone": "eu-west-1a",
            "podsCapacity": 4,
        },
        {
            "name": "ip-10-0-2-5.eu-west-1.compute.internal",
            "instanceId": "i-0aaaaaaaaaaaaaaa2",
            "zone": "eu-west-1b",
            "ready": False,
        },
    ],
    "deployments": [{"name": "api", "namespace": "team", "replicas": 2, "pdb": {"minAvailable": 1}}],
    "configMaps": [{"name": "settings", "namespace": "team", "data": {"k": "v"}}],
    "objects": [
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "l", "namespace": "ops"},
        }
    ],
}


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_seed_file_in_yaml_or_json_builds_the_same_cluster(
    server: KubeServer, tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"seed{suffix}"
    path.write_text(json.dumps(SEED) if suffix == ".json" else yaml.safe_dump(SEED))
    server.seed(path)
    server.settle()
    assert server.node_for_instance("i-0aaaaaaaaaaaaaaa1") == "ip-10-0-1-5.eu-west-1.compute.internal"
    not_ready = server.get_object("nodes", "ip-10-0-2-5.eu-west-1.compute.internal")
    assert not_ready is not None
    assert [c["status"] for c in not_ready["status"]["conditions"] if c["type"] == "Ready"] == ["False"]
    assert server.get_object("configmaps", "settings", "team")["data"] == {"k": "v"}  # type: ignore[index]
    assert server.get_object("leases", "l", "ops") is not None  # its namespace was created for it
    pods = server.objects("pods", "team")
    assert [p["spec"]["nodeName"] for p in pods] == ["ip-10-0-1-5.eu-west-1.compute.internal"] * 2


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        ({"node": []}, "unknown key(s) in seed: node"),
        ({"nodes": [{"instanceId": "i-1", "zone": "eu-west-1a"}]}, "needs a name or a privateIp"),
        ({"nodes": [{"name": "n", "zone": "eu-west-1a"}]}, "needs instanceId"),
        ({"deployments": [{"name": "x", "replica": 2}]}, "unknown key(s) in Deployment seed: replica"),
        (
            {"objects": [{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}]},
            "does not serve batch/v1 Job",
        ),
    ],
)
def test_a_malformed_seed_is_refused_with_a_message_naming_the_problem(
    server: KubeServer, seed: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        server.seed(seed)
    assert message in str(raised.value)
