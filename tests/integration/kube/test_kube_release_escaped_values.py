"""A node's release (the drain's cleanup, the sweeper) on the real Kubernetes adapter against the sandbox API server,
whose JSON patch ``test`` compares raw JSON text as kube-apiserver's library does (see
tests/sandbox/test_kube_json_patch_raw_values.py): a tested value the official client escapes otherwise than Go's
encoding/json (``&``, ``<``, ``>``: Go writes ``\\u0026``...) never equals the node's, however unchanged it is. The
in-progress annotation carries the lifecycle's token, and a disruption's token is its event's id, which nothing but
its length bounds; the released-for mark is the record's id, which carries it too."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.ports.cluster import (
    IN_PROGRESS_ANNOTATION,
    OWNER_ANNOTATION,
    RELEASED_FOR_ANNOTATION,
    Claim,
)
from nodecycle_sandbox.kube import KubeServer

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
SEED = {"nodes": [{"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"}]}
EVENT_ID = (
    "rebalance<1>&retry"  # (an id EventBridge never writes, but the intake takes: only its length is bound)
)


def _annotate(server: KubeServer, annotations: dict[str, Any]) -> None:
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"metadata": {"annotations": annotations}})
    admin.api_client.close()


def _annotations(server: KubeServer) -> dict[str, str]:
    return dict((server.get_object("nodes", NODE) or {})["metadata"].get("annotations") or {})


def test_a_node_whose_in_progress_annotation_holds_html_characters_is_released(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node claimed for a disruption whose event id holds characters Go escapes
    progress = json.dumps(
        {"instance": INSTANCE, "transition": "rebalance", "token": EVENT_ID}, separators=(",", ":")
    )
    _annotate(server, {OWNER_ANNOTATION: "stack-a", IN_PROGRESS_ANNOTATION: progress})
    node = cluster.get_node(NODE)
    assert node is not None
    assert node.in_progress == progress

    # When its drain's cleanup releases it, as read and unchanged since
    claim = cluster.release_node(node, released_for=f"{INSTANCE}/rebalance")

    # Then it is released: not a conflict at every try, the annotations left on the node for ever
    assert claim is Claim.CLAIMED
    annotations = _annotations(server)
    assert OWNER_ANNOTATION not in annotations
    assert IN_PROGRESS_ANNOTATION not in annotations
    assert annotations[RELEASED_FOR_ANNOTATION] == f"{INSTANCE}/rebalance"


@pytest.mark.parametrize("mark", [f"{INSTANCE}/rebalance/{EVENT_ID}", f"{INSTANCE}/terminate/café"])
def test_a_released_for_mark_with_characters_escaped_otherwise_is_cleared(
    cluster: KubeCluster, server: KubeServer, mark: str
) -> None:
    # Given the node released for a lifecycle whose id holds characters the two encoders write apart
    _annotate(server, {RELEASED_FOR_ANNOTATION: mark})
    node = cluster.get_node(NODE)
    assert node is not None
    assert node.released_for == mark

    # When the mark is cleared (its lifecycle over), Then it is
    assert cluster.release_node(node) is Claim.CLAIMED
    assert RELEASED_FOR_ANNOTATION not in _annotations(server)
