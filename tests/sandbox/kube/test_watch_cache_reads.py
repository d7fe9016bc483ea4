"""Which reads a lagging watch cache serves, as kube-apiserver's cacher decides it (KEP-2523; the cacher's
shouldDelegateList): a get naming any version, and a list naming one without a limit (``"0"``, or "not older
than" a version), are served from the cache, which may be behind etcd; a read naming none (a quorum read), a list
naming a version with a limit, and an ``Exact`` list are served from etcd. A version the cache has not reached
is waited for, then refused: 504, "Too large resource version"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer

from .conftest import Kube, connect, status_of

NAMESPACE = "default"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[KubeServer, Kube]]:
    with KubeServer(tick_seconds=0.05) as server:
        kube = connect(server)
        yield server, kube
        kube.api_client.close()


def config_map(kube: Kube, **query: Any) -> dict[str, Any]:
    """The budget ConfigMap, as a get with ``query`` answers it (the client's read method names no version)."""
    names = {"resource_version": "resourceVersion"}
    method, url, headers, _, _ = kube.api_client.param_serialize(
        "GET",
        "/api/v1/namespaces/{namespace}/configmaps/{name}",
        path_params={"namespace": NAMESPACE, "name": "budget"},
        query_params=[(names[k], v) for k, v in query.items()],
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = kube.api_client.call_api(method, url, header_params=headers)
    response.read()
    if response.status >= 400:
        raise ApiException(http_resp=response)
    body: dict[str, Any] = json.loads(response.data)
    return body


def listed(kube: Kube, **query: Any) -> dict[str, Any]:
    response = kube.core.list_namespaced_config_map(NAMESPACE, _preload_content=False, **query)
    body: dict[str, Any] = json.loads(response.data)
    return body


def values(body: dict[str, Any]) -> list[str]:
    """The budget ConfigMap's value, in a get's answer or a list's."""
    found = [o for o in body.get("items", [body]) if o["metadata"]["name"] == "budget"]
    return [o["data"]["v"] for o in found]


@pytest.fixture
def lagging(cluster: tuple[KubeServer, Kube]) -> Iterator[tuple[Kube, str]]:
    """The ConfigMap written "old", its watch cache held there, then written "new": (the client, the version
    the cache is held at)."""
    server, kube = cluster
    created = kube.core.create_namespaced_config_map(
        NAMESPACE, {"metadata": {"name": "budget"}, "data": {"v": "old"}}
    )
    held = str(created.metadata.resource_version)
    try:
        with server.lagging_watch_cache("configmaps"):
            kube.core.patch_namespaced_config_map("budget", NAMESPACE, {"data": {"v": "new"}})
            yield kube, held
    finally:
        kube.core.delete_namespaced_config_map("budget", NAMESPACE)


@pytest.mark.parametrize(
    ("read", "query", "seen"),
    [
        ("get", {}, "new"),  # a quorum read
        ("get", {"resource_version": "0"}, "old"),
        ("get", {"resource_version": "held"}, "old"),  # not older than: the cache has it
        ("list", {}, "new"),
        ("list", {"resource_version": "0", "limit": 1}, "old"),  # the cache ignores the limit
        ("list", {"resource_version": "held", "resource_version_match": "NotOlderThan"}, "old"),
        ("list", {"resource_version": "held"}, "old"),  # not older than, without a limit
        ("list", {"resource_version": "held", "resource_version_match": "NotOlderThan", "limit": 5}, "new"),
    ],
)
def test_reads_that_name_a_version_without_a_limit_are_served_from_the_lagging_watch_cache(
    lagging: tuple[Kube, str], read: str, query: dict[str, Any], seen: str
) -> None:
    kube, held = lagging
    query = {k: held if v == "held" else v for k, v in query.items()}
    body = config_map(kube, **query) if read == "get" else listed(kube, **query)
    assert values(body) == [seen]


@pytest.mark.parametrize("read", ["get", "list"])
def test_a_version_the_lagging_cache_has_not_reached_is_refused_as_too_large(
    lagging: tuple[Kube, str], read: str
) -> None:
    # Given the version of the write the cache lags behind
    kube, held = lagging
    latest = str(config_map(kube)["metadata"]["resourceVersion"])
    assert int(latest) > int(held)
    # When a read asks for a state not older than it, Then the cache (which the sandbox never brings
    # further while held) refuses it as kube-apiserver does once its wait for the cache ends
    reads = {
        "get": lambda: config_map(kube, resource_version=latest),
        "list": lambda: listed(kube, resource_version=latest, resource_version_match="NotOlderThan"),
    }
    with pytest.raises(ApiException) as refused:
        reads[read]()
    assert refused.value.status == 504
    assert f"Too large resource version: {latest}, current: {held}" in status_of(refused.value)["message"]
