"""The sweeper's annotation part on the real Kubernetes adapter, against the sandbox API server, acting as the
sweeper (its group, its RBAC): the answers an API server gives for one node it will not patch (an admission
webhook's denial, a webhook's "not now") come here as a server gives them."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, OWNER_ANNOTATION
from nodecycle.domain.sweep.annotations import LeftoverAnnotations
from nodecycle.domain.sweep.nodes import SweepNodes
from nodecycle.domain.sweep.sweeper import SweepFailed
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry
from nodecycle_sandbox.kube.admission import Denial
from tests.integration.budget.conftest import RBAC, admin_api
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.sweeper.test_orphans import AMPLE

SWEEPER_KEY = "AKIATESTSWEEPROLE000"
SWEEPER_ROLE = "arn:aws:iam::123456789012:role/nodecycle-SweeperFunctionRole"
OWNER = "stack-a"
# Listed in this order: the node the API server refuses comes first
NODES = {
    "ip-10-0-1-10.eu-west-1.compute.internal": "i-0a1b2c3d4e5f60101",
    "ip-10-0-1-11.eu-west-1.compute.internal": "i-0a1b2c3d4e5f60102",
    "ip-10-0-1-12.eu-west-1.compute.internal": "i-0a1b2c3d4e5f60103",
}
REFUSED = "ip-10-0-1-10.eu-west-1.compute.internal"


@pytest.fixture
def server() -> Iterator[KubeServer]:
    """Three nodes annotated by this owner for lifecycles that are over (they have no record)."""
    with KubeServer(tls=True) as kube:
        kube.apply(RBAC)
        kube.add_access_entries([AccessEntry(SWEEPER_ROLE, ("nodecycle-sweeper",))])
        kube.map_role(SWEEPER_KEY, SWEEPER_ROLE, "nodecycle-SweeperFunction")
        admin = admin_api(kube)
        for name, instance in NODES.items():
            kube.add_node(name, instance_id=instance, zone="eu-west-1a")
            progress = {"instance": instance, "transition": "terminate", "token": "t", "started": "x"}
            annotations = {OWNER_ANNOTATION: OWNER, IN_PROGRESS_ANNOTATION: json.dumps(progress)}
            admin.patch_node(name, {"metadata": {"annotations": annotations}})
        yield kube


def annotated(server: KubeServer) -> list[str]:
    """The nodes that still carry this owner's annotation."""
    return sorted(
        node["metadata"]["name"]
        for node in server.objects("nodes")
        if node["metadata"].get("annotations", {}).get(OWNER_ANNOTATION) == OWNER
    )


@pytest.mark.parametrize(
    ("code", "reason"), [(403, "Forbidden"), (429, "TooManyRequests")], ids=["denied", "throttled"]
)
def test_one_node_the_api_server_will_not_patch_does_not_keep_the_others_annotated(
    server: KubeServer, code: int, reason: str
) -> None:
    # Given an admission webhook that refuses every update of the first node (a policy protecting it, or
    # shedding load)
    server.admission.deny(Denial("protect-nodes.example.com", "UPDATE", "nodes", "*", REFUSED, code, reason))
    metrics = FakeMetrics()
    part = LeftoverAnnotations(
        owner=OWNER,
        cluster=SweepNodes(KubeCluster(lambda: server.api_client(SWEEPER_KEY))),
        records=InMemoryRecords(),
        metrics=metrics,
    )

    # When the sweep clears the leftover annotations, Then it reports the sweep failed
    with pytest.raises(SweepFailed, match="1 nodes"):
        part([], T0, AMPLE)

    # but only after the other nodes were cleared: the refused one alone keeps them, and it is counted
    assert annotated(server) == [REFUSED]
    assert (metrics.counts["AnnotationsCleared"], metrics.counts["AnnotationFailures"]) == (2, 1)


def test_the_sweep_judges_the_nodes_by_their_metadata_not_their_whole_objects(server: KubeServer) -> None:
    # Given three nodes left annotated by this owner, and what one list of them as whole objects costs
    server.reset_counters()
    admin_api(server).list_node(resource_version="0")
    whole = server.bytes_sent()[("list", "nodes")]
    server.reset_counters()
    part = LeftoverAnnotations(
        owner=OWNER,
        cluster=SweepNodes(KubeCluster(lambda: server.api_client(SWEEPER_KEY))),
        records=InMemoryRecords(),
        metrics=FakeMetrics(),
    )

    # When the sweep clears the leftover annotations
    part([], T0, AMPLE)

    # Then it clears them all, having listed the nodes' metadata only (annotations and versions are all it
    # judges and patches by): a fraction of the bytes. A real node's spec and status (its images, above all)
    # are most of its 10-25 KB, and an API server answers resourceVersion=0 from its watch cache with every
    # node at once: listed whole, 5,000 nodes are over 100 MB of JSON for a 512 MB sweeper, at every sweep
    assert annotated(server) == []
    assert server.bytes_sent()[("list", "nodes")] < whole / 2
