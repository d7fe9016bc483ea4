"""The first Kubernetes call of a warm Lambda container after minutes of silence. EKS's endpoint sits behind a
Network Load Balancer whose idle timeout (350 s, fixed for TLS listeners: Elastic Load Balancing, "Update the TCP
idle timeout for your Network Load Balancer listener") forgets a flow without a FIN: urllib3's check before it
reuses a pooled connection (is_connection_dropped: readable, i.e. closed by the peer) sees nothing, and the request
goes out on a flow no one tracks, to meet a reset or no answer until the read timeout. The drain function is called
when an instance terminates, minutes or hours apart: its first read of the node failed (a step retried, a warning,
a StepRetries count), and a write sent first (a claim, an eviction) was lost all the same."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import IDLE_SECONDS, EksCluster
from nodecycle.domain.errors import TransientError
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import eks_describing

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
SEED = {
    "namespaces": ["shop"],
    "nodes": [{"privateIp": "10.0.1.10", "instanceId": "i-0a1b2c3d4e5f60101", "zone": "eu-west-1a"}],
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 2}],
}
PROGRESS = json.dumps(
    {"instance": "i-0a1b2c3d4e5f60101", "transition": "terminate", "token": "t", "started": "x"}
)


class Clock:
    """The wall clock of a Lambda container, which runs on while it is frozen."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def eks(server: KubeServer, clock: Clock) -> Iterator[EksCluster]:
    with eks_describing(server):
        yield EksCluster("sandbox", wall_clock=clock)


@pytest.mark.parametrize("how", ["reset", "blackhole"])
def test_the_first_calls_after_an_idle_gap_go_on_fresh_connections(
    eks: EksCluster, server: KubeServer, clock: Clock, how: str
) -> None:
    # Given a container that read the node, then was frozen longer than the load balancer's idle timeout
    cluster = KubeCluster(eks.api_client)
    node = cluster.get_node(NODE)
    assert node is not None
    assert server.drop_idle_flows(how) >= 1
    clock.now += IDLE_SECONDS + 60

    # When its next invocation claims the node (a write first) and lists its pods
    claimed = cluster.claim_node(
        node, owner="stack-a", in_progress=PROGRESS, cordon=True, exclude_from_lb=False
    )
    pods = cluster.pods_on(NODE)

    # Then both went on a new connection, and were answered
    assert claimed.name == "CLAIMED"
    assert len(pods) == 2
    assert (server.get_object("node", NODE) or {})["spec"].get("unschedulable") is True


def test_a_read_reset_on_a_connection_reused_soon_is_sent_again_at_once(
    eks: EksCluster, server: KubeServer
) -> None:
    # Given a flow lost within the idle bound (the API server's end closed while the container was frozen, its FIN
    # never seen): the client's clock shows no gap
    cluster = KubeCluster(eks.api_client)
    assert cluster.get_node(NODE) is not None
    opened = server.connections_opened()
    server.drop_idle_flows("reset")

    # When the node is read on it: Then it is read (a GET sent again on a new connection, once)
    node = cluster.get_node(NODE)
    assert node is not None
    assert node.name == NODE
    assert server.connections_opened() == opened + 1


def test_a_write_reset_on_a_connection_reused_soon_is_not_sent_again(
    eks: EksCluster, server: KubeServer
) -> None:
    # Given the same lost flow, and a write on it (its answer lost: it may have been applied, as far as the client
    # can tell)
    cluster = KubeCluster(eks.api_client)
    node = cluster.get_node(NODE)
    assert node is not None
    server.drop_idle_flows("reset")
    server.reset_counters()

    # When the node is claimed on it: Then the claim fails as transient, and was not sent again by the client
    with pytest.raises(TransientError):
        cluster.claim_node(node, owner="stack-a", in_progress=PROGRESS, cordon=True, exclude_from_lb=False)
    assert server.counters().get(("patch", "nodes"), 0) == 0

    # ...nor an eviction so lost
    pod = cluster.pods_on(NODE)[0]
    server.drop_idle_flows("reset")
    server.reset_counters()
    with pytest.raises(TransientError):
        cluster.evict(pod, 30)
    assert server.counters() == {}
