"""metadata.managedFields kept on every write, as kube-apiserver keeps them: what each manager set, in every
answer and every metadata-only read, so that what is listed and patched has a real object's size."""

from __future__ import annotations

import json

from nodecycle_sandbox.kube import KubeServer

from .conftest import Kube, nodes_seed

METADATA_LIST = "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io"


def _entries(server: KubeServer, name: str) -> dict[str, dict[str, object]]:
    (node,) = [n for n in server.objects("nodes") if n["metadata"]["name"] == name]
    return {(e["manager"] + "/" + e.get("subresource", "")): e for e in node["metadata"]["managedFields"]}


def test_each_manager_owns_what_it_wrote_and_a_metadata_list_carries_it(
    server: KubeServer, kube: Kube
) -> None:
    # Given a node its kubelet registered
    server.seed({"nodes": nodes_seed(1)})
    server.settle()
    name = kube.core.list_node().items[0].metadata.name
    assert "f:conditions" in json.dumps(_entries(server, name)["kubelet/"]["fieldsV1"])

    # When the official client cordons it and labels it, and another manager takes the label over
    kube.core.patch_node(name, {"spec": {"unschedulable": True}, "metadata": {"labels": {"x": "1"}}})
    kube.core.patch_node(name, {"metadata": {"labels": {"x": "2"}}}, field_manager="nodecycle")
    server.settle()  # (the node lifecycle controller's unschedulable taint of the cordoned node, a write of its own)

    # Then each owns what it last set, in an Update entry of its own
    entries = _entries(server, name)
    assert entries["OpenAPI-Generator/"]["fieldsV1"] == {"f:spec": {"f:unschedulable": {}}}
    assert entries["nodecycle/"]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:x": {}}}}
    assert {e["operation"] for e in entries.values()} == {"Update"}
    # and a metadata-only list sends them, as a real API server does
    listed = kube.core.list_node(_preload_content=False, _headers={"Accept": METADATA_LIST})
    (item,) = json.loads(listed.data)["items"]
    assert item["metadata"]["managedFields"] == server.objects("nodes")[0]["metadata"]["managedFields"]


def test_a_removed_field_is_owned_by_none_and_an_empty_entry_goes(server: KubeServer, kube: Kube) -> None:
    server.seed({"nodes": nodes_seed(1)})
    server.settle()
    name = kube.core.list_node().items[0].metadata.name
    kube.core.patch_node(name, {"metadata": {"labels": {"x": "1"}}}, field_manager="labeller")
    assert "labeller/" in _entries(server, name)

    kube.core.patch_node(name, {"metadata": {"labels": {"x": None}}}, field_manager="remover")

    assert "labeller/" not in _entries(server, name)
    assert "remover/" not in _entries(server, name)  # it set nothing that stays


def test_a_write_that_changes_nothing_changes_no_entry(server: KubeServer, kube: Kube) -> None:
    server.seed({"nodes": nodes_seed(1)})
    server.settle()
    name = kube.core.list_node().items[0].metadata.name
    # (a label: a cordon would have the node lifecycle controller taint the node after it, a write of its own)
    node = kube.core.patch_node(name, {"metadata": {"labels": {"x": "1"}}})

    again = kube.core.patch_node(name, {"metadata": {"labels": {"x": "1"}}}, field_manager="someone-else")

    assert again.metadata.resource_version == node.metadata.resource_version
    assert "someone-else/" not in _entries(server, name)


def test_a_client_sending_managed_fields_in_an_update_does_not_replace_them(
    server: KubeServer, kube: Kube
) -> None:
    server.seed({"nodes": nodes_seed(1)})
    server.settle()
    node = kube.core.list_node().items[0]
    before = _entries(server, node.metadata.name)

    node.metadata.managed_fields = []
    node.metadata.labels["y"] = "1"
    kube.core.replace_node(node.metadata.name, node)

    after = _entries(server, node.metadata.name)
    assert after["kubelet/"] == before["kubelet/"]
    assert after["OpenAPI-Generator/"]["fieldsV1"] == {"f:metadata": {"f:labels": {"f:y": {}}}}
