"""The sandbox's taint manager and DaemonSet controller read tolerations as kube-controller-manager does: of the
tolerations that match a NoExecute taint, the shortest tolerationSeconds wins (taint_eviction.go,
getMinTolerationTime: one without seconds tolerates for ever only if none of the others has any), whatever their
order; and a DaemonSet's pods carry the not-ready and unreachable tolerations without seconds in place of their
template's of the same key and effect (daemon/util AddOrUpdateDaemonPodTolerations), so they stay."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle_sandbox.kube import node_lifecycle
from nodecycle_sandbox.kube.controllers import daemon_tolerations

NOT_READY = node_lifecycle.NOT_READY_TAINT
EVERYTHING = {"operator": "Exists"}  # (tolerates every taint, for ever)
FIVE_MINUTES = {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}


def _pod(tolerations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"spec": {"tolerations": tolerations}}


@pytest.mark.parametrize("tolerations", [[FIVE_MINUTES, EVERYTHING], [EVERYTHING, FIVE_MINUTES]])
def test_the_shortest_matching_toleration_wins_whatever_the_order(tolerations: list[dict[str, Any]]) -> None:
    assert node_lifecycle.toleration_seconds(_pod(tolerations), NOT_READY, 300.0) == 300.0


def test_a_toleration_without_seconds_alone_tolerates_for_ever() -> None:
    assert node_lifecycle.toleration_seconds(_pod([EVERYTHING]), NOT_READY, 300.0) is None


def test_a_pod_without_a_matching_toleration_gets_the_admission_default() -> None:
    assert node_lifecycle.toleration_seconds(_pod([]), NOT_READY, 300.0) == 300.0
    assert node_lifecycle.toleration_seconds(_pod([]), node_lifecycle.OUT_OF_SERVICE_TAINT, 300.0) == 0.0


def test_a_daemonset_template_toleration_with_seconds_is_replaced_by_the_controllers_own() -> None:
    tolerations = daemon_tolerations([{**FIVE_MINUTES, "tolerationSeconds": 60}])
    assert node_lifecycle.tolerates_for_ever(tolerations, NOT_READY)
    assert node_lifecycle.toleration_seconds(_pod(tolerations), NOT_READY, 300.0) is None
