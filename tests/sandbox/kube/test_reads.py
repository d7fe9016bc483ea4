"""Reads as kube-apiserver serves them: metadata-only representations chosen by the Accept header, the
resourceVersion a read may be served from, one node by field selector, and the bytes each response costs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer

from .conftest import Kube, connect, node_name, nodes_seed, status_of

METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[KubeServer, Kube]]:
    """6 nodes over 3 zones, two of them labelled as one node group."""
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.0) as server:
        seed = nodes_seed(6)
        for node in seed[:2]:
            node["labels"] = {"example.com/group": "blue"}
        server.seed({"nodes": seed})
        kube = connect(server)
        yield server, kube
        kube.api_client.close()


def list_nodes(kube: Kube, accept: str | None = None, **query: Any) -> dict[str, Any]:
    headers = {} if accept is None else {"Accept": accept}
    response = kube.core.list_node(_preload_content=False, _headers=headers, **query)
    body: dict[str, Any] = json.loads(response.data)
    return body


def test_a_metadata_list_carries_each_object_s_metadata_and_nothing_else(
    cluster: tuple[KubeServer, Kube],
) -> None:
    _, kube = cluster
    # When the nodes are listed with the Accept header of a metadata-only client
    listed = list_nodes(kube, METADATA_LIST)
    # Then the list is a PartialObjectMetadataList of the same objects, with their labels and versions only
    full = list_nodes(kube)
    assert (listed["kind"], listed["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
    assert [item["metadata"] for item in listed["items"]] == [item["metadata"] for item in full["items"]]
    assert {item["kind"] for item in listed["items"]} == {"PartialObjectMetadata"}
    assert all(set(item) == {"kind", "apiVersion", "metadata"} for item in listed["items"])
    assert listed["metadata"]["resourceVersion"] == full["metadata"]["resourceVersion"]


def test_a_metadata_list_honours_selectors_and_paging(cluster: tuple[KubeServer, Kube]) -> None:
    _, kube = cluster
    blue = list_nodes(kube, METADATA_LIST, label_selector="example.com/group=blue")
    assert [item["metadata"]["name"] for item in blue["items"]] == [node_name(0, 10), node_name(1, 10)]
    first = list_nodes(kube, METADATA_LIST, limit=4)
    rest = list_nodes(kube, METADATA_LIST, limit=4, _continue=first["metadata"]["continue"])
    assert len(first["items"]) + len(rest["items"]) == 6


def test_one_object_s_metadata_is_a_partial_object(cluster: tuple[KubeServer, Kube]) -> None:
    _, kube = cluster
    response = kube.core.read_node(node_name(0, 10), _preload_content=False, _headers={"Accept": METADATA})
    body = json.loads(response.data)
    assert (body["kind"], body["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
    assert body["metadata"]["labels"]["example.com/group"] == "blue"
    assert set(body) == {"kind", "apiVersion", "metadata"}


def test_a_metadata_representation_that_does_not_fit_the_request_is_refused_whatever_alternative_follows(
    cluster: tuple[KubeServer, Kube],
) -> None:
    _, kube = cluster
    # A list asked for as one object's metadata: 406, as kube-apiserver answers, and so with plain JSON as the
    # next alternative: its negotiation takes either metadata kind for any endpoint ("TODO: should delineate
    # between lists and non-list endpoints"), and only the transform refuses it, with nothing to fall back to
    for accept in (METADATA, f"{METADATA},application/json"):
        with pytest.raises(ApiException) as refused:
            list_nodes(kube, accept)
        assert refused.value.status == 406
        assert status_of(refused.value)["reason"] == "NotAcceptable"
        assert (
            "you requested PartialObjectMetadata, but the requested object is a list"
            in (status_of(refused.value)["message"])
        )
    # and one object asked for as a list's metadata
    with pytest.raises(ApiException) as refused:
        kube.core.read_node(
            node_name(0, 10), _preload_content=False, _headers={"Accept": f"{METADATA_LIST},application/json"}
        )
    assert refused.value.status == 406
    assert (
        "you requested PartialObjectMetadataList, but the requested object is not a list"
        in (status_of(refused.value)["message"])
    )
    # A representation of another group is not offered at all: the next alternative is served
    listed = list_nodes(
        kube, "application/json;as=PartialObjectMetadataList;g=example.com;v=v1,application/json"
    )
    assert listed["kind"] == "NodeList"
    assert "status" in listed["items"][0]


def test_a_read_from_the_watch_cache_ignores_the_limit(cluster: tuple[KubeServer, Kube]) -> None:
    _, kube = cluster
    # resourceVersion=0: any version will do, and kube-apiserver serves it from its cache, whole
    listed = list_nodes(kube, METADATA_LIST, resource_version="0", limit=2)
    assert len(listed["items"]) == 6
    assert "continue" not in listed["metadata"]


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ({"resource_version_match": "NotOlderThan"}, 400),  # a match without a version
        ({"resource_version": "abc"}, 400),
        ({"resource_version": "999999999"}, 504),  # newer than anything the server has
        ({"resource_version": "1", "resource_version_match": "Exact"}, 410),  # a past state: not kept
        ({"resource_version": "0", "resource_version_match": "Exact"}, 400),
    ],
)
def test_a_read_version_the_server_cannot_serve_is_refused(
    cluster: tuple[KubeServer, Kube], query: dict[str, str], code: int
) -> None:
    _, kube = cluster
    with pytest.raises(ApiException) as refused:
        list_nodes(kube, **query)
    assert refused.value.status == code


def test_a_continued_list_may_not_name_a_version(cluster: tuple[KubeServer, Kube]) -> None:
    _, kube = cluster
    first = list_nodes(kube, limit=2)
    with pytest.raises(ApiException) as refused:
        list_nodes(kube, limit=2, _continue=first["metadata"]["continue"], resource_version="0")
    assert refused.value.status == 400
    assert "continue" in status_of(refused.value)["message"]


def test_a_version_not_newer_than_the_latest_reads_the_latest(cluster: tuple[KubeServer, Kube]) -> None:
    _, kube = cluster
    latest = list_nodes(kube)["metadata"]["resourceVersion"]
    assert len(list_nodes(kube, resource_version=latest)["items"]) == 6


def test_one_node_is_listed_by_its_name(cluster: tuple[KubeServer, Kube]) -> None:
    _, kube = cluster
    listed = list_nodes(kube, METADATA_LIST, field_selector=f"metadata.name={node_name(2, 11)}")
    assert [item["metadata"]["name"] for item in listed["items"]] == [node_name(2, 11)]


def test_the_server_counts_the_bytes_it_sends_and_receives_per_kind_of_request(
    cluster: tuple[KubeServer, Kube],
) -> None:
    server, kube = cluster
    server.reset_counters()
    # Given a full list, a metadata-only list and a refused request
    full = kube.core.list_node(_preload_content=False)
    metadata = kube.core.list_node(_preload_content=False, _headers={"Accept": METADATA_LIST})
    with pytest.raises(ApiException):
        kube.core.read_node("no-such-node")
    # Then each response's body is counted under its request, exactly as long as it was
    sent = server.bytes_sent()
    assert sent[("list", "nodes")] == len(full.data) + len(metadata.data)
    # (smaller, but not by much: the metadata carries the managedFields, as a real API server's does)
    assert len(metadata.data) < len(full.data)
    assert b'"managedFields"' in metadata.data
    assert sent[("get", "nodes")] > 0  # the 404's Status body
    assert server.counters() == {("list", "nodes"): 2, ("get", "nodes"): 1}
    # And a request body is counted as received
    kube.core.patch_node(node_name(0, 11), {"metadata": {"labels": {"x": "y"}}})
    assert server.bytes_received()[("patch", "nodes")] == len(b'{"metadata": {"labels": {"x": "y"}}}')
