"""The sandbox's kubelet once it is back (``revive``) or its container runtime answers again (``hang_runtime(...,
False)``), as harsh as a real one: nothing sent the pods deleted meanwhile their SIGTERM (a kubelet gone never saw
their deletion; a runtime hung never delivered its StopContainer), so each stops within its deletion's grace counted
from then, its own shutdown's time, not at once because its deadline passed while nobody stopped it. A pod asked to
stop before the kubelet went stops at its own pace (its container got its signal): confirmed once a kubelet is there.
On the kubelet itself, its monotonic clock the test's (no wall sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from nodecycle_sandbox.kube import kubelet as kubelet_module
from nodecycle_sandbox.kube.builders import node_object
from nodecycle_sandbox.kube.history import SANDBOX
from nodecycle_sandbox.kube.kubelet import Kubelet
from nodecycle_sandbox.kube.meta import SHUTDOWN_ANNOTATION
from nodecycle_sandbox.kube.resources import NODES, PODS
from nodecycle_sandbox.kube.store import Store

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
SHUTDOWN = 20.0  # how long the pod's app takes to stop once signalled
GRACE = 30  # its deletion's grace


class _Clock:
    def __init__(self) -> None:
        self.mono = 1000.0

    def monotonic(self) -> float:
        return self.mono


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> _Clock:
    """The kubelet's monotonic clock, moved by the test (its wall clock left as it is)."""
    moved = _Clock()
    monkeypatch.setattr(kubelet_module, "time", SimpleNamespace(monotonic=moved.monotonic, time=time.time))
    return moved


def _on_a_node(clock: _Clock) -> tuple[Store, Kubelet, Callable[[], bool]]:
    """A node with one running pod whose app takes SHUTDOWN to stop; whether the pod is still there."""
    store = Store()
    kubelet = Kubelet(store, start_seconds=0.0, shutdown_seconds=0.0, lease_renew_seconds=10.0)
    node = node_object(
        NODE, instance_id="i-0a", zone="eu-west-1a", ready=True, labels=None, pods_capacity=110, now=0
    )
    node["metadata"]["uid"] = "uid-node"
    store.write(NODES, node, verb="create", source=SANDBOX)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "shop",
            "uid": "uid-web-0",
            "annotations": {SHUTDOWN_ANNOTATION: str(SHUTDOWN)},
        },
        "spec": {"nodeName": NODE, "terminationGracePeriodSeconds": GRACE, "containers": [{"name": "web"}]},
        "status": {"phase": "Running"},
    }
    store.write(PODS, pod, verb="create", source=SANDBOX)
    return store, kubelet, lambda: store.get(PODS, "shop", "web-0") is not None


def _delete(store: Store, kubelet: Kubelet) -> None:
    pod = store.get(PODS, "shop", "web-0")
    assert pod is not None
    kubelet.delete_pod(pod, GRACE, verb="delete", source=SANDBOX, resource="pods")


@pytest.mark.parametrize("gone", ["kubelet dead", "runtime hung"])
def test_a_pod_deleted_while_nothing_stops_it_stops_within_its_shutdown_from_the_kubelet_s_return(
    clock: _Clock, gone: str
) -> None:
    # Given a pod on a node whose kubelet is gone (or whose runtime hangs)
    store, kubelet, there = _on_a_node(clock)
    (kubelet.kill if gone == "kubelet dead" else kubelet.hang_runtime)(NODE)
    # When it is deleted, and its deletion's deadline passes with nothing to stop it
    _delete(store, kubelet)
    clock.mono += GRACE + 60
    kubelet.sync()
    assert there()
    # ...and then the kubelet is back (its runtime answers again)
    kubelet.revive(NODE) if gone == "kubelet dead" else kubelet.hang_runtime(NODE, False)

    # Then the pod is still there right after: signalled only now, its app takes its shutdown to stop
    kubelet.sync()
    assert there()
    clock.mono += SHUTDOWN - 1
    kubelet.sync()
    assert there()
    # and it goes once that shutdown is over
    clock.mono += 1
    kubelet.sync()
    assert not there()


def test_a_pod_signalled_before_its_kubelet_went_is_confirmed_stopped_once_it_is_back(clock: _Clock) -> None:
    # Given a pod deleted on a node whose kubelet lives: signalled, its app stopping
    store, kubelet, there = _on_a_node(clock)
    _delete(store, kubelet)
    # When its kubelet goes before it reports the pod stopped, and comes back long after the app stopped
    kubelet.kill(NODE)
    clock.mono += SHUTDOWN + 60
    kubelet.sync()
    assert there()
    kubelet.revive(NODE)

    # Then the pod goes at once: nothing was left to stop
    kubelet.sync()
    assert not there()
