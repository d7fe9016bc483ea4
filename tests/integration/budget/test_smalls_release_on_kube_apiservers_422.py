"""A node's release (the sweeper clearing this owner's leftover annotations, the drain's cleanup) whose JSON patch
tests fail, against an API server that answers it as kube-apiserver does: a generic 422 ("the server rejected our
request due to an error in our request", reason Invalid, ``details: {}``), none of its library's words and no
cause (handlers/patch.go: NewGenericServerResponse(422, ..., isUnexpectedResponse=false); see
tests/sandbox/kube/test_smalls_json_patch_not_applied.py).

adapters/kube/cluster_api._test_failed tells a failed test by those words or by an UnexpectedServerResponse cause,
neither of which kube-apiserver sends: a node that changed since its release read it (claimed again, registered
again under its name) is taken for the node's refusal (Refused), not left to its new holder (Claim.CONFLICT)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, OWNER_ANNOTATION, Claim
from nodecycle.domain.sweep.nodes import SweepNodes
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry
from tests.integration.budget.conftest import RBAC, admin_api

SWEEPER_KEY = "AKIATESTSWEEPROLE000"
SWEEPER_ROLE = "arn:aws:iam::123456789012:role/nodecycle-SweeperFunctionRole"
OWNER = "stack-a"
NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"


def progress(token: str) -> str:
    return json.dumps({"instance": INSTANCE, "transition": "terminate", "token": token, "started": "x"})


@pytest.fixture
def kube() -> Iterator[tuple[KubeServer, Any]]:
    """One node annotated by this owner for a lifecycle that is over, on a server that answers a JSON patch not
    applied as kube-apiserver does."""
    with KubeServer(tls=True) as server:
        server.apply(RBAC)
        server.add_access_entries([AccessEntry(SWEEPER_ROLE, ("nodecycle-sweeper",))])
        server.map_role(SWEEPER_KEY, SWEEPER_ROLE, "nodecycle-SweeperFunction")
        admin = admin_api(server)
        server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
        annotations = {OWNER_ANNOTATION: OWNER, IN_PROGRESS_ANNOTATION: progress("t")}
        admin.patch_node(NODE, {"metadata": {"annotations": annotations}})
        yield server, admin
        admin.api_client.close()


def test_a_release_of_a_node_claimed_again_since_its_read_leaves_it_on_kube_apiservers_422(
    kube: tuple[KubeServer, Any],
) -> None:
    server, admin = kube
    cluster = KubeCluster(lambda: server.api_client(SWEEPER_KEY))
    (read,) = SweepNodes(cluster).nodes_owned_by(OWNER)
    # Given the node claimed again since it was read, by this owner for another lifecycle
    admin.patch_node(NODE, {"metadata": {"annotations": {IN_PROGRESS_ANNOTATION: progress("later")}}})

    # When its release runs, Then it is left to its new holder (before: Refused, "the server rejected our request
    # due to an error in our request")
    assert cluster.release_node(read) is Claim.CONFLICT
    annotations = admin.read_node(NODE).metadata.annotations
    assert annotations[IN_PROGRESS_ANNOTATION] == progress("later")
