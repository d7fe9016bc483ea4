"""The write history of the sandbox API server, and replays of it that tests assert on."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from nodecycle_sandbox.kube.meta import ZONE_LABEL

API = "api"  # a write requested over HTTP (the product, kubectl, a test's client)
SANDBOX = "sandbox"  # a write of the simulated kubelet / controllers, a seed or a test helper

# Who asked for the write this thread serves: the authenticated user, as kube-apiserver's audit log records it for
# every request (audit.k8s.io Event ``user.username``). The router sets it per request, as it sets the field manager.
_requests = threading.local()


def requested_as(user: str) -> None:
    """The authenticated user of the API request this thread serves from now on."""
    _requests.user = user


def requester() -> str:
    return str(getattr(_requests, "user", ""))


@dataclass(frozen=True)
class HistoryEntry:
    """One write, in resourceVersion order.

    ``object`` is the object as stored after the write; for ``removed`` entries, its last state. ``verb`` and
    ``resource`` name the request that caused it: an eviction is ``("create", "pods/eviction")`` on the pod.
    """

    resource_version: int
    time: float  # time.time() of the write
    verb: str
    resource: str
    namespace: str
    name: str
    source: str
    removed: bool
    object: dict[str, Any] = field(repr=False)
    # the authenticated user whose request made an API write (a function's assumed-role session, kubectl's user);
    # "" for the sandbox's own writes
    user: str = ""

    @property
    def unschedulable(self) -> bool:
        return bool((self.object.get("spec") or {}).get("unschedulable"))

    @property
    def zone(self) -> str | None:
        labels = (self.object.get("metadata") or {}).get("labels") or {}
        return labels.get(ZONE_LABEL)

    @property
    def kind(self) -> str:
        return str(self.object.get("kind", ""))


def max_unschedulable(history: Iterable[HistoryEntry], *, zone: str | None = None) -> int:
    """The most nodes (of ``zone``, or of the whole cluster) that were cordoned at the same time.

    Replays every Node write in order; a removed node stops counting. Give it the full history (from the
    server's start, or from a ``reset_history`` taken while no node was cordoned).
    """
    cordoned: set[str] = set()
    peak = 0
    for entry in history:
        if entry.kind != "Node":
            continue
        if entry.unschedulable and not entry.removed and (zone is None or entry.zone == zone):
            cordoned.add(entry.name)
        else:
            cordoned.discard(entry.name)
        peak = max(peak, len(cordoned))
    return peak
