"""The object store: every object of the cluster, a global resourceVersion counter and the write history."""

from __future__ import annotations

import dataclasses
import threading
import time
import uuid
from collections.abc import Callable

from nodecycle_sandbox.kube import history, managed_fields
from nodecycle_sandbox.kube.history import HistoryEntry
from nodecycle_sandbox.kube.meta import JsonObj, json_copy, metadata
from nodecycle_sandbox.kube.resources import ALL, ResourceType

Key = tuple[str, str]  # (namespace or "", name)


class Store:
    """All objects behind one re-entrant lock.

    Locking discipline: every method takes ``lock`` itself; a caller that reads and then writes (an update
    checked against a resourceVersion, an eviction counting a budget's healthy pods, a controller pass)
    holds ``lock`` around the whole sequence. Stored objects are never mutated: a write stores a new dict,
    so a reference taken under the lock stays a consistent snapshot, and responses are serialised after
    the lock is released.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._revision = 0
        self._compacted = (
            0  # the revision the history was last compacted at: older ones can no longer be read
        )
        self._objects: dict[ResourceType, dict[Key, JsonObj]] = {rt: {} for rt in ALL}
        self._by_uid: dict[str, tuple[ResourceType, Key]] = {}
        # each type's keys in list order, kept until a key comes or goes: a controller pass lists every type
        # several times, and sorting them each time was a quarter of the API server's CPU at 600 nodes
        self._order: dict[ResourceType, list[Key]] = {}
        self._history: list[HistoryEntry] = []
        # called under the lock after every write or removal, with the type written
        self.listeners: list[Callable[[ResourceType], None]] = []
        # Each Event's last write (monotonic), which its TTL runs from: kube-apiserver stores an Event in etcd under
        # a lease of --event-ttl granted at every create and update of it (see Controllers.expire_events)
        self.events_written: dict[Key, float] = {}
        # The PodDisruptionBudgets (namespace, name) other writers keep updating meanwhile: every status write of
        # the eviction handler on one of them meets a conflict (see eviction.evict)
        self.contended_budgets: set[tuple[str, str]] = set()

    @property
    def revision(self) -> int:
        return self._revision

    @property
    def compacted(self) -> int:
        return self._compacted

    def compact(self) -> None:
        """Forget every revision before the current one, as etcd's compaction does (kube-apiserver asks for one
        every 5 minutes): a list continued from an older revision can no longer be served."""
        with self.lock:
            self._compacted = self._revision

    def get(self, rt: ResourceType, namespace: str, name: str) -> JsonObj | None:
        with self.lock:
            return self._objects[rt].get((namespace if rt.namespaced else "", name))

    def items(self, rt: ResourceType, namespace: str | None = None) -> list[JsonObj]:
        """Objects sorted by (namespace, name), the order lists and pagination use."""
        with self.lock:
            table = self._objects[rt]
            order = self._order.get(rt)
            if order is None:
                order = self._order[rt] = sorted(table)
            if namespace is None:
                return [table[k] for k in order]
            return [table[k] for k in order if k[0] == namespace]

    def has_uid(self, uid: str) -> bool:
        with self.lock:
            return uid in self._by_uid

    def by_uid(self, uid: str) -> JsonObj | None:
        with self.lock:
            found = self._by_uid.get(uid)
            return None if found is None else self._objects[found[0]].get(found[1])

    def new_uid(self) -> str:
        return str(uuid.uuid4())

    def write(self, rt: ResourceType, obj: JsonObj, *, verb: str, source: str, resource: str = "") -> JsonObj:
        """Store ``obj`` (new or replacing) under a new resourceVersion. The store owns ``obj`` from now on."""
        with self.lock:
            self._revision += 1
            meta = obj["metadata"]
            meta["resourceVersion"] = str(self._revision)
            key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
            old = self._objects[rt].get(key)
            if old is None:
                self._order.pop(rt, None)
            subresource = resource.partition("/")[2]
            managed_fields.track(rt, old, obj, source=source, subresource=subresource, now=time.time())
            self._objects[rt][key] = obj
            if rt.plural == "events" and not rt.group:
                self.events_written[key] = time.monotonic()
            self._by_uid[meta["uid"]] = (rt, key)
            self._record(rt, obj, verb, source, resource, removed=False)
            for listener in self.listeners:
                listener(rt)
            return obj

    def remove(
        self, rt: ResourceType, namespace: str, name: str, *, verb: str, source: str, resource: str = ""
    ) -> JsonObj | None:
        """Delete an object for good; returns its last state, or None when it did not exist."""
        with self.lock:
            key = (namespace if rt.namespaced else "", name)
            obj = self._objects[rt].pop(key, None)
            if obj is None:
                return None
            if rt.plural == "events" and not rt.group:
                self.events_written.pop(key, None)
            self._order.pop(rt, None)
            self._by_uid.pop(metadata(obj).get("uid", ""), None)
            self._revision += 1
            self._record(rt, obj, verb, source, resource, removed=True)
            for listener in self.listeners:
                listener(rt)
            return obj

    def _record(
        self, rt: ResourceType, obj: JsonObj, verb: str, source: str, resource: str, *, removed: bool
    ) -> None:
        meta = obj["metadata"]
        self._history.append(
            HistoryEntry(
                resource_version=self._revision,
                time=time.time(),
                verb=verb,
                resource=resource or rt.plural,
                namespace=meta.get("namespace", ""),
                name=meta["name"],
                source=source,
                removed=removed,
                object=obj,
                user=history.requester() if source == history.API else "",
            )
        )

    def history(self) -> list[HistoryEntry]:
        """Entries with copied objects, so a test can never change what the store holds."""
        with self.lock:
            entries = list(self._history)
        return [_copied(e) for e in entries]

    def reset_history(self) -> None:
        with self.lock:
            self._history.clear()


def _copied(entry: HistoryEntry) -> HistoryEntry:
    return dataclasses.replace(entry, object=json_copy(entry.object))
