"""A sandbox API server with nodes over three zones, and the official client on it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import pytest
from kubernetes import client

from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle_sandbox.kube import KubeServer

ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
NAMESPACE = "kube-system"


def node_name(index: int) -> str:
    return f"ip-10-0-{index % 3 + 1}-{10 + index // 3}.eu-west-1.compute.internal"


def zone_of(index: int) -> str:
    return ZONES[index % 3]


def instance_of(index: int) -> str:
    return f"i-0{index:016x}"


def core_api(server: KubeServer) -> client.CoreV1Api:
    """A CoreV1Api with its own ApiClient (connection pool), configured as the product's: CA + bearer."""
    return client.CoreV1Api(server.api_client())


def add_nodes(server: KubeServer, count: int) -> None:
    """``count`` Ready nodes round-robin over the three zones."""
    for i in range(count):
        server.add_node(node_name(i), instance_id=instance_of(i), zone=zone_of(i))


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(tls=True) as started:
        yield started


@pytest.fixture(params=["CoreV1Api", "CoreV1"])
def core(server: KubeServer, request: pytest.FixtureRequest) -> Iterator[client.CoreV1Api]:
    """The official client's CoreV1Api, and the product's CoreV1, which makes the same calls without it:
    the budget's adapters must behave alike on both."""
    api = core_api(server)
    yield api if request.param == "CoreV1Api" else cast("client.CoreV1Api", CoreV1(api.api_client))
    api.api_client.close()
