"""A node's release (one JSON patch whose tests are the node's uid, this owner's marks as read, and the cordon and
load balancer label it lifts as read) against writes that land between its read and its patch, on the real
Kubernetes adapter and the sandbox's API server, which answers a failed test as kube-apiserver does (a generic
422). What tests/integration/kube/test_release_after_status_post.py does not try: what the release lifts changed
under it (an operator's uncordon, the label removed), its mark alone read, values a JSON pointer would
escape. Each CONFLICT is followed by the release read again, as the cleanup does: it is never a conflict for ever."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from unittest.mock import patch

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.core_v1 import CoreV1
from nodecycle.domain.ports.cluster import (
    EXCLUDE_LB_LABEL,
    IN_PROGRESS_ANNOTATION,
    OWNER_ANNOTATION,
    RELEASED_FOR_ANNOTATION,
    Claim,
    NodeInfo,
)
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import RBAC, admin_api

OWNER = "stack-a"
NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
PROGRESS = json.dumps({"instance": INSTANCE, "transition": "terminate", "token": "t~1/x~0", "started": "x"})


@pytest.fixture
def kube() -> Iterator[tuple[KubeCluster, Any]]:
    """One node claimed by this owner as a drain claims it: annotated, cordoned, labelled out of load balancers."""
    with KubeServer(tls=True) as server:
        server.apply(RBAC)
        admin = admin_api(server)
        server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
        server.settle()  # (the controller's lift of the new node's not-ready taint: a write the claim would race)
        cluster = KubeCluster(lambda: admin.api_client)
        read = cluster.get_node(NODE)
        assert read is not None
        claim = cluster.claim_node(read, owner=OWNER, in_progress=PROGRESS, cordon=True, exclude_from_lb=True)
        assert claim is Claim.CLAIMED
        # (the controller's unschedulable taint on the cordoned node: a write that would race a test's next one, and
        # make its read stale: a 409, as on a real cluster, where the caller reads again)
        server.settle()
        yield cluster, admin
        admin.api_client.close()


def read(cluster: KubeCluster) -> NodeInfo:
    node = cluster.get_node(NODE)
    assert node is not None
    return node


def test_an_operators_uncordon_since_the_read_fails_the_release_which_read_again_lifts_no_later_cordon(
    kube: tuple[KubeCluster, Any],
) -> None:
    cluster, admin = kube
    before = read(cluster)
    admin.patch_node(NODE, {"spec": {"unschedulable": None}})  # kubectl uncordon

    assert cluster.release_node(before, uncordon=True, unlabel=True) is Claim.CONFLICT
    assert read(cluster).owner == OWNER  # nothing of the patch applied
    # read again: nothing to lift of the cordon; an operator's cordon after this read is not lifted either
    again = read(cluster)
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    assert cluster.release_node(again, uncordon=True, unlabel=True) is Claim.CLAIMED
    after = read(cluster)
    assert (after.owner, after.in_progress, after.unschedulable, after.excluded_from_lb) == (
        None,
        None,
        True,
        False,
    )


def test_a_label_removed_since_the_read_fails_the_release_once_not_for_ever(
    kube: tuple[KubeCluster, Any],
) -> None:
    cluster, admin = kube
    before = read(cluster)
    admin.patch_node(NODE, {"metadata": {"labels": {EXCLUDE_LB_LABEL: None}}})

    assert cluster.release_node(before, uncordon=True, unlabel=True) is Claim.CONFLICT
    assert cluster.release_node(read(cluster), uncordon=True, unlabel=True) is Claim.CLAIMED
    after = read(cluster)
    assert (after.owner, after.unschedulable, after.excluded_from_lb) == (None, False, False)


def test_a_label_given_another_value_is_lifted_not_a_conflict_at_every_try(
    kube: tuple[KubeCluster, Any],
) -> None:
    cluster, admin = kube
    # Given the label nodecycle set given another value (kubectl label --overwrite ...=): the service controller
    # and the read both go by its key alone
    admin.patch_node(NODE, {"metadata": {"labels": {EXCLUDE_LB_LABEL: ""}}})

    # When the release is read and tried, Then it lifts it (before: its test of "true" failed, a CONFLICT at every
    # try, the annotations and the cordon kept until the release was given up and told as refused)
    assert cluster.release_node(read(cluster), uncordon=True, unlabel=True) is Claim.CLAIMED
    after = read(cluster)
    assert (after.owner, after.unschedulable, after.excluded_from_lb) == (None, False, False)


def test_a_label_removed_since_the_read_is_a_conflict_in_the_librarys_words_too(
    kube: tuple[KubeCluster, Any],
) -> None:
    cluster, _ = kube
    # (a server or proxy that passes evanphx/json-patch's words on in the message, as some do for a failed test)
    error = ApiException(status=422, reason="Unprocessable Entity")
    words = f"Unable to remove nonexistent key: {EXCLUDE_LB_LABEL}: missing value"
    error.body = json.dumps({"kind": "Status", "code": 422, "reason": "Invalid", "message": words})
    with patch.object(CoreV1, "patch_node", side_effect=error):
        assert cluster.release_node(read(cluster), uncordon=True, unlabel=True) is Claim.CONFLICT


def test_a_mark_alone_read_is_not_released_once_another_lifecycle_claimed_the_node(
    kube: tuple[KubeCluster, Any],
) -> None:
    cluster, _ = kube
    # Given the node released for its lifecycle (its mark alone: a warm pool's stop), read so by a watch
    assert cluster.release_node(read(cluster), released_for="rec/1~") is Claim.CLAIMED
    marked = read(cluster)
    assert (marked.owner, marked.released_for, marked.unschedulable) == (None, "rec/1~", True)
    # and claimed since by the instance's next lifecycle (its claim removes the mark)
    claimed = cluster.claim_node(
        marked, owner=OWNER, in_progress=PROGRESS + " ", cordon=True, exclude_from_lb=False
    )
    assert claimed is Claim.CLAIMED

    # When the watch lifts what its lifecycle set, Then the next lifecycle's cordon and marks stay (invariant 3)
    assert cluster.release_node(marked, uncordon=True, unlabel=True) is Claim.CONFLICT
    after = read(cluster)
    assert (after.owner, after.in_progress, after.unschedulable, after.excluded_from_lb) == (
        OWNER,
        PROGRESS + " ",
        True,
        True,
    )


def test_annotation_values_a_pointer_would_escape_are_tested_as_they_are(
    kube: tuple[KubeCluster, Any],
) -> None:
    cluster, admin = kube
    before = read(cluster)
    # the same value with its "~1" read as "/" (an escape applied to a value, not a path, would pass this test)
    changed = PROGRESS.replace("t~1/x", "t//x")
    admin.patch_node(NODE, {"metadata": {"annotations": {IN_PROGRESS_ANNOTATION: changed}}})
    assert cluster.release_node(before) is Claim.CONFLICT

    admin.patch_node(NODE, {"metadata": {"annotations": {IN_PROGRESS_ANNOTATION: PROGRESS}}})
    assert cluster.release_node(read(cluster), released_for="i~1/a#terminate#t~0") is Claim.CLAIMED
    annotations = admin.read_node(NODE).metadata.annotations or {}
    assert OWNER_ANNOTATION not in annotations
    assert IN_PROGRESS_ANNOTATION not in annotations
    assert annotations[RELEASED_FOR_ANNOTATION] == "i~1/a#terminate#t~0"
