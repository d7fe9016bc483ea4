"""A sandbox API server with nodes over three zones and deploy/rbac.yaml applied, and the official client
on it acting as the drain function (its group, its RBAC)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from kubernetes import client

from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle.adapters.kube.eks_access import CLIENT_RETRIES
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry

ZONES = ("eu-west-1a", "eu-west-1b", "eu-west-1c")
NAMESPACE = "nodecycle"  # the template's default BudgetNamespace, where deploy/rbac.yaml ships the budget
RBAC = Path(__file__).resolve().parents[3] / "deploy" / "rbac.yaml"
DRAIN_KEY = "AKIATESTDRAINROLE000"
DRAIN_ROLE = "arn:aws:iam::123456789012:role/nodecycle-DrainFunctionRole"


def node_name(index: int) -> str:
    return f"ip-10-0-{index % 3 + 1}-{10 + index // 3}.eu-west-1.compute.internal"


def zone_of(index: int) -> str:
    return ZONES[index % 3]


def instance_of(index: int) -> str:
    return f"i-0{index:016x}"


def core_api(server: KubeServer) -> client.CoreV1Api:
    """A CoreV1Api with its own ApiClient (connection pool), configured as the product's (CA + bearer, and its
    retries), signed by the drain function's role: what it may do is what deploy/rbac.yaml grants the drain group.
    With urllib3's default retries instead, a 429 (or a 503) with Retry-After to a read or a replace was slept out
    and sent again up to three times, in the client: the budget never saw the throttling the product's client
    hands it, and a 429 that outlasted the retries came as a connection failure (an outcome unknown)."""
    unused = server.api_client(DRAIN_KEY)
    config = unused.configuration
    unused.close()
    config.retries = CLIENT_RETRIES  # (read when the connection pool is made: before the ApiClient)
    return client.CoreV1Api(client.ApiClient(config))


def admin_api(server: KubeServer) -> client.CoreV1Api:
    """The cluster administrator's client, for what a platform team does by hand."""
    return client.CoreV1Api(server.api_client())


def act_as_drain(server: KubeServer) -> None:
    """The cluster as deployed: deploy/rbac.yaml applied, the drain role's access entry."""
    server.apply(RBAC)
    server.add_access_entries([AccessEntry(DRAIN_ROLE, ("nodecycle-drain",))])
    server.map_role(DRAIN_KEY, DRAIN_ROLE, "nodecycle-DrainFunction")


def add_nodes(server: KubeServer, count: int) -> None:
    """``count`` Ready nodes round-robin over the three zones, once the node lifecycle controller has answered their
    registration (lifted the not-ready taint the API server puts on every new node: a write to each node that a
    test's first read-modify-write of it would otherwise race)."""
    for i in range(count):
        server.add_node(node_name(i), instance_id=instance_of(i), zone=zone_of(i))
    server.settle()


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(tls=True) as started:
        act_as_drain(started)
        yield started


@pytest.fixture(params=["CoreV1Api", "CoreV1"])
def core(server: KubeServer, request: pytest.FixtureRequest) -> Iterator[client.CoreV1Api]:
    """The official client's CoreV1Api, and the product's CoreV1, which makes the same calls without it:
    the budget's adapters must behave alike on both."""
    api = core_api(server)
    yield api if request.param == "CoreV1Api" else cast("client.CoreV1Api", CoreV1(api.api_client))
    api.api_client.close()
