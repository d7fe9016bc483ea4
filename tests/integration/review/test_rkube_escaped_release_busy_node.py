"""A release whose tested values a JSON patch ``test`` cannot hold for on kube-apiserver (``&``, ``<``, ``>`` or
non-ASCII: see cluster_api._testable) is guarded by the node's resourceVersion instead. On the real adapter against
the sandbox's API server: the node's kubelet posting its status between the read and the patch (as it does every few
seconds to minutes) must not make that release a conflict at every sweep."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.ports.cluster import (
    IN_PROGRESS_ANNOTATION,
    OWNER_ANNOTATION,
    RELEASED_FOR_ANNOTATION,
    Claim,
)
from nodecycle.domain.sweep.annotations import LeftoverAnnotations
from nodecycle.domain.sweep.nodes import SweepNodes
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry
from tests.integration.budget.conftest import RBAC, admin_api
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.sweeper.test_orphans import AMPLE

SWEEPER_KEY = "AKIATESTSWEEPROLE000"
SWEEPER_ROLE = "arn:aws:iam::123456789012:role/nodecycle-SweeperFunctionRole"
OWNER = "stack-a"
NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
TOKEN = "rebalance<1>&retry"  # a disruption's event id: only its length is bound
PROGRESS = json.dumps({"instance": INSTANCE, "transition": "rebalance", "token": TOKEN, "started": "x"})


@pytest.fixture
def kube() -> Iterator[tuple[KubeServer, Any]]:
    """One node annotated by this owner for a lifecycle that is over (it has no record)."""
    with KubeServer(tls=True) as server:
        server.apply(RBAC)
        server.add_access_entries([AccessEntry(SWEEPER_ROLE, ("nodecycle-sweeper",))])
        server.map_role(SWEEPER_KEY, SWEEPER_ROLE, "nodecycle-SweeperFunction")
        admin = admin_api(server)
        server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
        # (the node lifecycle controller's answer to the registration first: it lifts the not-ready taint the API
        # server put on the new node, a write that would race the status post below)
        server.settle()
        admin.patch_node(
            NODE, {"metadata": {"annotations": {OWNER_ANNOTATION: OWNER, IN_PROGRESS_ANNOTATION: PROGRESS}}}
        )
        yield server, admin
        admin.api_client.close()


def _post_status(admin: Any) -> None:
    """The node's kubelet posts its status (nodes/status): the node's resourceVersion moves."""
    node = admin.read_node_status(NODE)
    for condition in node.status.conditions:
        if condition.type == "Ready":
            condition.message = "kubelet is posting ready status (again)"
    admin.replace_node_status(NODE, node)


def _annotations(server: KubeServer) -> dict[str, str]:
    return dict((server.get_object("nodes", NODE) or {})["metadata"].get("annotations") or {})


def test_the_sweeper_clears_an_escaped_token_whose_node_posted_status_since_the_listing(
    kube: tuple[KubeServer, Any],
) -> None:
    server, admin = kube
    nodes = SweepNodes(KubeCluster(lambda: server.api_client(SWEEPER_KEY)))
    part = LeftoverAnnotations(owner=OWNER, cluster=nodes, records=InMemoryRecords(), metrics=FakeMetrics())
    # Given the sweep's listing of the nodes, then the node's kubelet posting its status before the patch
    assert NODE in nodes.node_names()
    _post_status(admin)

    # When the annotations' part runs, Then it clears them, the token's characters notwithstanding (before: 409 on
    # the listed resourceVersion, skipped, and so at every sweep on a node that posts between list and patch)
    assert part([], T0, AMPLE) == {"AnnotationsCleared": 1}
    assert OWNER_ANNOTATION not in _annotations(server)
    assert IN_PROGRESS_ANNOTATION not in _annotations(server)


def test_an_escaped_release_still_leaves_a_node_claimed_again_since_it_was_read(
    kube: tuple[KubeServer, Any],
) -> None:
    server, admin = kube
    cluster = KubeCluster(lambda: server.api_client(SWEEPER_KEY))
    (read,) = SweepNodes(cluster).nodes_owned_by(OWNER)
    # Given the node claimed again since it was read (another lifecycle of this owner), then a status post
    later = PROGRESS.replace(TOKEN, TOKEN + "&later")
    admin.patch_node(NODE, {"metadata": {"annotations": {IN_PROGRESS_ANNOTATION: later}}})
    _post_status(admin)

    # Then the release of what was read is a conflict, whatever it retries (invariant 3)
    assert cluster.release_node(read, released_for=f"{INSTANCE}/rebalance") is Claim.CONFLICT
    assert _annotations(server)[IN_PROGRESS_ANNOTATION] == later
    assert RELEASED_FOR_ANNOTATION not in _annotations(server)
