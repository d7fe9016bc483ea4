"""Which NotReady kubelet the drain takes for one whose runtime stops no pod (NodeInfo.runtime_down), by the words of its
Ready condition (the kubelet's runtime errors, pkg/kubelet/runtime.go and pleg/generic.go, 1.28 to 1.33): a runtime
hung or down, yes; a kubelet that has just started, no: until its first runtime check and its PLEG's first relist (a
second or so) it says "container runtime status check may not have completed yet" and "PLEG is not healthy: pleg has
yet to be successful", and then stops the pods deleted on its node as any kubelet does."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle.adapters.kube.cluster_api import node_info


def _node(status: str, message: str) -> dict[str, Any]:
    ready = {"type": "Ready", "status": status, "reason": "KubeletNotReady", "message": message}
    return {"metadata": {"name": "ip-10-0-1-10", "uid": "u1"}, "status": {"conditions": [ready]}}


@pytest.mark.parametrize(
    "message",
    [
        # a kubelet (re)starting: its runtime and PLEG not checked yet (it stops pods within a second or two)
        "[container runtime status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful]",
        "PLEG is not healthy: pleg has yet to be successful",
        "container runtime status check may not have completed yet",
        # its network only: it stops pods
        "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin "
        "returns error: cni plugin not initialized",
        # a node shutting down: its kubelet stops the pods itself
        "node is shutting down",
    ],
)
def test_a_kubelet_that_will_stop_its_pods_is_not_taken_for_lost(message: str) -> None:
    node = node_info(_node("False", message))
    assert (node.kubelet_lost, node.runtime_down) == (False, False)


@pytest.mark.parametrize(
    "message",
    [
        "PLEG is not healthy: pleg was last seen active 3m5.123s ago; threshold is 3m0s",
        "[container runtime is down, PLEG is not healthy: pleg was last seen active 4m1s ago; threshold is 3m0s]",
        "container runtime is down",
        "container runtime not ready: RuntimeReady=false reason:ContainerdNotReady message:...",
        "EventedPLEG is not healthy: pleg was last seen active 3m1s ago; threshold is 3m0s",
    ],
)
def test_a_kubelet_whose_runtime_is_hung_or_down_is_taken_for_lost(message: str) -> None:
    # (its kubelet lives: not lost, but its runtime stops nothing while it is down)
    node = node_info(_node("False", message))
    assert (node.kubelet_lost, node.runtime_down) == (False, True)
