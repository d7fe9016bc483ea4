"""Events last kube-apiserver's --event-ttl after their last write (default 1 h), then go, read or not: etcd
deletes the key when the lease granted at the write expires (kubernetes/kubernetes#124836: "kube-apiserver default
event ttl is 1h"). A sandbox whose Events never went would show an operator's ``kubectl get events`` what the
cluster no longer has an hour on."""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.controllers import EVENT_TTL_SECONDS
from tests.sandbox.kube.conftest import connect

TTL = 0.6


def event(name: str, message: str = "drained") -> Any:
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=name, namespace="default"),
        involved_object=client.V1ObjectReference(kind="Node", name="ip-10-0-1-1"),
        reason="NodeDrained",
        message=message,
        type="Normal",
    )


def names(core: Any) -> set[str]:
    return {e.metadata.name for e in core.list_namespaced_event("default").items}


def wait_gone(core: Any, name: str, within: float) -> float:
    """How long ``name`` took to go, waited for ``within`` seconds at most."""
    start = time.monotonic()
    while name in names(core):
        assert time.monotonic() - start < within, f"event {name} still there after {within} s"
        time.sleep(0.05)
    return time.monotonic() - start


def test_the_default_ttl_is_kube_apiservers() -> None:
    assert EVENT_TTL_SECONDS == 3600


def test_an_event_goes_once_its_ttl_has_passed_since_its_last_write() -> None:
    with KubeServer(tls=False, event_ttl_seconds=TTL) as server:
        core = connect(server).core
        core.create_namespaced_event("default", event("first"))
        time.sleep(TTL / 2)
        core.create_namespaced_event("default", event("second"))
        # an update renews the lease: the first written again lasts as long as the second
        first = core.read_namespaced_event("first", "default")
        first.message = "drained again"
        core.replace_namespaced_event("first", "default", first)
        assert names(core) == {"first", "second"}

        wait_gone(core, "second", within=TTL * 4)
        wait_gone(core, "first", within=TTL)
        assert names(core) == set()
