"""The drain function's calls share their connections to the API server. urllib3 gives a connection back to its
pool once the answer on it has been read whole; the adapters ask for raw answers (``_preload_content=False``), and
one they never read (a node's claim or release, answered with the whole node; a forced delete, answered with the
pod; an Event, answered with itself) kept its connection from the pool: the next call opened another, a TCP and a
TLS handshake with EKS's endpoint each (urllib3's HTTPResponse: "unread data in the HTTPResponse connection blocks
the connection from being released back to the pool", drain_conn). A drain's force policy deleting 50 pods made 50
handshakes, within the run's time that its pass counts."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import eks_describing

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
SEED = {
    "namespaces": ["shop"],
    "nodes": [{"privateIp": "10.0.1.10", "instanceId": "i-0a1b2c3d4e5f60101", "zone": "eu-west-1a"}],
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 3}],
}
PROGRESS = json.dumps(
    {"instance": "i-0a1b2c3d4e5f60101", "transition": "terminate", "token": "t", "started": "x"}
)


@pytest.fixture
def eks(server: KubeServer) -> Iterator[EksCluster]:
    with eks_describing(server):
        yield EksCluster("sandbox")


def test_a_drains_writes_leave_their_connection_to_the_next_call(eks: EksCluster, server: KubeServer) -> None:
    # Given the drain function's adapters on one client, as its wiring builds them, and its first read made
    cluster = KubeCluster(eks.api_client)
    events = KubeEvents(eks.api_client, owner="stack-a")
    node = cluster.get_node(NODE)
    assert node is not None
    before = server.connections_opened()

    # When it claims the node, tells of it, deletes its pods, reads it again and releases it
    claimed = cluster.claim_node(
        node, owner="stack-a", in_progress=PROGRESS, cordon=True, exclude_from_lb=False
    )
    events.on_node(NODE, node.uid, "Cordoned", "Cordoned by nodecycle")
    for pod in cluster.pods_on(NODE):
        assert cluster.delete_pod(pod, 0)
    node = cluster.get_node(NODE)
    assert node is not None
    released = cluster.release_node(node, uncordon=True)
    assert cluster.node_version(NODE) is not None

    # Then every call went on the connection of the first read
    assert (claimed.name, released.name) == ("CLAIMED", "CLAIMED")
    assert server.connections_opened() == before
