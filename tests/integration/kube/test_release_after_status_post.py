"""A release of a node (the sweeper clearing this owner's leftover annotations, the drain's cleanup) on the real
Kubernetes adapter against the sandbox's API server: the node changes under it all the time (its kubelet posts
status, controllers write labels and annotations of their own), and what a release may rely on is the
annotations it clears, not the node's resourceVersion."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, OWNER_ANNOTATION, Claim, Refused
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


def progress(token: str) -> str:
    return json.dumps({"instance": INSTANCE, "transition": "terminate", "token": token, "started": "x"})


@pytest.fixture
def kube() -> Iterator[tuple[KubeServer, Any]]:
    """One node annotated by this owner for a lifecycle that is over (it has no record)."""
    with KubeServer(tls=True) as server:
        server.apply(RBAC)
        server.add_access_entries([AccessEntry(SWEEPER_ROLE, ("nodecycle-sweeper",))])
        server.map_role(SWEEPER_KEY, SWEEPER_ROLE, "nodecycle-SweeperFunction")
        admin = admin_api(server)
        server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
        server.settle()  # (the controller's lift of the new node's not-ready taint: a write the status posts would race)
        annotations = {OWNER_ANNOTATION: OWNER, IN_PROGRESS_ANNOTATION: progress("t")}
        admin.patch_node(NODE, {"metadata": {"annotations": annotations}})
        yield server, admin
        admin.api_client.close()


def post_status(admin: Any) -> None:
    """The node's kubelet posts its status (nodes/status), as it does every few seconds to minutes."""
    node = admin.read_node_status(NODE)
    for condition in node.status.conditions:
        if condition.type == "Ready":
            condition.message = "kubelet is posting ready status (again)"
    admin.replace_node_status(NODE, node)


def owner_of(server: KubeServer) -> tuple[str | None, str | None]:
    (node,) = [n for n in server.objects("nodes") if n["metadata"]["name"] == NODE]
    annotations = node["metadata"].get("annotations") or {}
    return annotations.get(OWNER_ANNOTATION), annotations.get(IN_PROGRESS_ANNOTATION)


def test_the_sweeper_releases_a_node_whose_kubelet_posted_status_since_the_sweep_listed_it(
    kube: tuple[KubeServer, Any],
) -> None:
    server, admin = kube
    nodes = SweepNodes(KubeCluster(lambda: server.api_client(SWEEPER_KEY)))
    metrics = FakeMetrics()
    part = LeftoverAnnotations(owner=OWNER, cluster=nodes, records=InMemoryRecords(), metrics=metrics)
    # Given the sweep's one list of the nodes (the budget's part lists them first), then the node's kubelet
    # posting its status before the annotations' part patches it
    assert NODE in nodes.node_names()
    version = admin.read_node(NODE).metadata.resource_version
    post_status(admin)
    assert admin.read_node(NODE).metadata.resource_version != version  # a status post moves the version

    # When the annotations' part runs, Then it clears them: the status is not what the release is about
    # (before: 409 on the listed resourceVersion, skipped without a word, and so at every sweep on a busy node)
    assert part([], T0, AMPLE) == {"AnnotationsCleared": 1}
    assert owner_of(server) == (None, None)


def test_a_release_leaves_a_node_another_lifecycle_claimed_since_it_was_read(
    kube: tuple[KubeServer, Any],
) -> None:
    server, admin = kube
    cluster = KubeCluster(lambda: server.api_client(SWEEPER_KEY))
    (read,) = SweepNodes(cluster).nodes_owned_by(OWNER)
    # Given the node claimed again since it was read: by this owner for another lifecycle, then by another owner
    admin.patch_node(NODE, {"metadata": {"annotations": {IN_PROGRESS_ANNOTATION: progress("later")}}})

    assert cluster.release_node(read) is Claim.CONFLICT
    assert owner_of(server) == (OWNER, progress("later"))

    admin.patch_node(NODE, {"metadata": {"annotations": {OWNER_ANNOTATION: "stack-b"}}})
    again = cluster.node_metadata()[0].model_copy(update={"owner": OWNER})  # as if read before

    assert (
        cluster.release_node(again) is Claim.CONFLICT
    )  # invariant 3: never release what another owner holds
    assert owner_of(server) == ("stack-b", progress("later"))


def test_a_release_leaves_a_node_registered_again_under_its_name(kube: tuple[KubeServer, Any]) -> None:
    server, admin = kube
    cluster = KubeCluster(lambda: server.api_client(SWEEPER_KEY))
    (read,) = SweepNodes(cluster).nodes_owned_by(OWNER)
    # Given the node deleted and registered again under its name, annotated alike (another node: another uid)
    server.remove_node(NODE)
    server.settle()
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
    server.settle()
    annotations = {OWNER_ANNOTATION: OWNER, IN_PROGRESS_ANNOTATION: progress("t")}
    admin.patch_node(NODE, {"metadata": {"annotations": annotations}})

    assert cluster.release_node(read) is Claim.CONFLICT
    assert owner_of(server) == (OWNER, progress("t"))


def test_a_drain_release_after_a_status_post_lifts_the_cordon_and_the_label_it_set(
    kube: tuple[KubeServer, Any],
) -> None:
    server, admin = kube
    cluster = KubeCluster(lambda: admin.api_client)
    read = cluster.get_node(NODE)
    assert read is not None
    claimed = cluster.claim_node(
        read.model_copy(update={"owner": None, "in_progress": None}),
        owner=OWNER,
        in_progress=progress("t2"),
        cordon=True,
        exclude_from_lb=True,
    )
    assert claimed is Claim.CLAIMED
    read = cluster.get_node(NODE)
    assert read is not None
    assert (read.unschedulable, read.excluded_from_lb) == (True, True)
    # (the node lifecycle controller's unschedulable taint after the cordon, a write of its own, in before the
    # kubelet reads the node for its post: a kubelet whose post a 409 refuses reads it again, this one would not)
    server.settle()
    post_status(admin)

    assert cluster.release_node(read, uncordon=True, unlabel=True) is Claim.CLAIMED
    after = cluster.get_node(NODE)
    assert after is not None
    assert (after.owner, after.in_progress, after.unschedulable, after.excluded_from_lb) == (
        None,
        None,
        False,
        False,
    )


def test_an_operator_cordon_since_the_read_of_a_node_not_cordoned_is_not_lifted(
    kube: tuple[KubeServer, Any],
) -> None:
    _, admin = kube
    cluster = KubeCluster(lambda: admin.api_client)
    read = cluster.get_node(NODE)
    assert read is not None
    assert not read.unschedulable
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})

    assert cluster.release_node(read, uncordon=True) is Claim.CLAIMED
    after = cluster.get_node(NODE)
    assert after is not None
    assert (after.owner, after.unschedulable) == (None, True)


def status(code: int, message: str, causes: list[dict[str, str]]) -> ApiException:
    error = ApiException(status=code, reason="Unprocessable Entity")
    body = {"kind": "Status", "status": "Failure", "message": message, "reason": "Invalid", "code": code}
    error.body = json.dumps({**body, "details": {"causes": causes}})
    return error


@pytest.mark.parametrize(
    ("error", "failed_test"),
    [
        # kube-apiserver's answer to a JSON patch whose test failed (its library's words as a cause)
        (
            status(
                422,
                "the server rejected our request due to an error in our request",
                [
                    {
                        "type": "UnexpectedServerResponse",
                        "message": "testing value /metadata/annotations/x failed",
                    }
                ],
            ),
            True,
        ),
        (status(422, "test operation does not apply: is missing path: /metadata/annotations", []), True),
        # the node's validation refusing what the patch made of it: the node's refusal, not a changed node
        (
            status(
                422,
                'Node "n" is invalid: metadata.labels: Invalid value',
                [{"type": "FieldValueInvalid", "message": "Invalid value", "field": "metadata.labels"}],
            ),
            False,
        ),
    ],
    ids=["kube-apiserver-test-failed", "missing-path", "validation"],
)
def test_a_release_tells_a_failed_test_from_the_nodes_refusal(
    kube: tuple[KubeServer, Any], error: ApiException, failed_test: bool
) -> None:
    server, _ = kube
    cluster = KubeCluster(lambda: server.api_client(SWEEPER_KEY))
    (read,) = SweepNodes(cluster).nodes_owned_by(OWNER)
    with patch.object(CoreV1, "patch_node", side_effect=error):
        if failed_test:
            assert cluster.release_node(read) is Claim.CONFLICT
        else:
            with pytest.raises(Refused):
                cluster.release_node(read)
