"""What the adapter reads of the stamps that tell a pod placed on a node after its cordon (drain/pods.py): the
timeAdded of the node's node.kubernetes.io/unschedulable:NoSchedule taint, which the node lifecycle controller stamps
(SwapNodeControllerTaint), and a pod's creationTimestamp, both kept on the API server's clock as written."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from nodecycle.adapters.kube.cluster_api import node_info, pod_info


def _node(*taints: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "ip-10-0-1-10", "uid": "u1"},
        "spec": {"unschedulable": True, "taints": list(taints)},
    }


def test_the_cordon_is_the_unschedulable_taints_time() -> None:
    node = node_info(
        _node(
            {
                "key": "node.kubernetes.io/not-ready",
                "effect": "NoSchedule",
                "timeAdded": "2026-12-01T09:00:00Z",
            },
            {
                "key": "node.kubernetes.io/unschedulable",
                "effect": "NoSchedule",
                "timeAdded": "2026-12-01T10:00:01Z",
            },
        )
    )
    assert node.cordoned_at == datetime(2026, 12, 1, 10, 0, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "taints",
    [
        [],  # not tainted yet: the controller acts moments after the cordon
        [
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
        ],  # put there by hand, without a time
        [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "yesterday"}],
        [
            {
                "key": "node.kubernetes.io/unschedulable",
                "effect": "NoExecute",
                "timeAdded": "2026-12-01T10:00:01Z",
            }
        ],
    ],
)
def test_without_the_controllers_stamp_the_cordons_time_is_unknown(taints: list[dict[str, Any]]) -> None:
    assert node_info(_node(*taints)).cordoned_at is None


def test_a_pods_creation_is_read_as_the_api_server_wrote_it() -> None:
    pod = pod_info(
        {"metadata": {"namespace": "ops", "name": "a", "creationTimestamp": "2026-12-01T10:00:07Z"}}
    )
    assert pod.created_at == datetime(2026, 12, 1, 10, 0, 7, tzinfo=UTC)
    assert pod_info({"metadata": {"namespace": "ops", "name": "a"}}).created_at is None
