"""A connection lost half-way through an answer (an API server replica going away, a flow reset). The adapters ask
for raw answers (``_preload_content=False``): the client returns once it has the status and headers, and the body
is read after, by the adapter. A body that fails then is a connection failure as any other, transient (urllib3's
ProtocolError, "Connection broken: IncompleteRead"); read outside the adapter's error handling, it escaped as
urllib3's own exception: not a TransientError that the step retries in a second or two, but an invocation failed,
its message back only after the queue's visibility timeout, and dead-lettered at its fifth failure."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.errors import TransientError
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
SEED = {
    "namespaces": ["shop"],
    "nodes": [{"privateIp": "10.0.1.10", "instanceId": "i-0a1b2c3d4e5f60101", "zone": "eu-west-1a"}],
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 2}],
}
READS: dict[str, tuple[str, Callable[[KubeCluster], Any]]] = {
    "node": ("GET nodes", lambda cluster: cluster.get_node(NODE)),
    "node metadata": ("GET nodes", lambda cluster: cluster.node_version(NODE)),
    "node lease": ("GET leases", lambda cluster: cluster.lease_renewed_at(NODE)),
    "pods of the node": ("GET pods", lambda cluster: cluster.pods_on(NODE)),
}


@pytest.mark.parametrize("read", sorted(READS))
def test_an_answer_cut_half_way_fails_the_read_as_transient(
    cluster: KubeCluster, server: KubeServer, read: str
) -> None:
    # Given an API server whose answers to this read are cut half-way through their bodies
    target, call = READS[read]
    call(cluster)  # (answered whole before)
    server.faults.arm([Fault("cut", "kube-cut-answer", target=target)], seed=1)

    # When the adapter reads, Then it fails as transient, as a connection lost before the answer does
    with pytest.raises(TransientError, match="IncompleteRead"):
        call(cluster)
    assert server.faults.firings()
