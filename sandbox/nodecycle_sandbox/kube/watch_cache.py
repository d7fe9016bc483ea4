"""A watch cache that lags: the reads it serves answered from an older state of a resource.

kube-apiserver serves a get or a list with ``resourceVersion=0`` ("any version") from its watch cache, which
follows etcd through a watch and may be behind it: by milliseconds usually, by seconds under load or while its
watch re-lists. Such a read may miss writes that were acknowledged before it was made (a cordon just patched);
a read that names no version (a consistent read) never does. So are a get naming a version and a list naming one
"not older than" without a limit (see read_versions.py): the cache waits until it has reached that version, and
may still be behind the latest. The sandbox keeps no history and serves every read from the latest state; a test
that needs the lag holds a resource's cache for a while (:meth:`KubeServer.lagging_watch_cache`): the reads the
cache serves then see the objects, and the list's ``resourceVersion``, as they were when the hold began, until it
ends (the cache catches up); one naming a later version is refused as one the cache has not reached. Writes and
every other read go on as ever.
"""

from __future__ import annotations

import threading

from nodecycle_sandbox.kube.meta import JsonObj
from nodecycle_sandbox.kube.resources import ResourceType


class WatchCache:
    """The resources whose watch cache is held behind, each with the state it is held at."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # by resource: the revision it lags at, and its objects then in list order (stored objects are never
        # mutated, so the references are a consistent snapshot)
        self._held: dict[ResourceType, tuple[int, list[JsonObj]]] = {}

    def hold(self, rt: ResourceType, revision: int, items: list[JsonObj]) -> None:
        with self._lock:
            self._held[rt] = (revision, list(items))

    def catch_up(self, rt: ResourceType) -> None:
        with self._lock:
            self._held.pop(rt, None)

    def state(self, rt: ResourceType, namespace: str | None) -> tuple[int, list[JsonObj]] | None:
        """The revision and objects (of ``namespace``; all for None) a cached read of ``rt`` sees; None when
        its cache is not held (it sees the latest state)."""
        with self._lock:
            held = self._held.get(rt)
        if held is None:
            return None
        revision, items = held
        if namespace is not None:
            items = [o for o in items if (o.get("metadata") or {}).get("namespace", "") == namespace]
        return revision, items
