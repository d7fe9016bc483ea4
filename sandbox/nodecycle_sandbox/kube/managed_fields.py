"""``metadata.managedFields``: which manager set which fields, kept on every write as kube-apiserver keeps it.

Every object of a real cluster carries them, and they are most of its metadata: a Node's several KB (its
kubelet's status conditions, addresses, capacity, its labels and taints set by others). A list, a metadata-only
list (``PartialObjectMetadataList``) and every write's answer carry them whole, so what the product lists and
patches, and the bytes the benchmarks count, are measured on objects of their real size only with them.

Kept as the field manager keeps them for ``Update`` operations: an entry per manager, operation, API version
and subresource, its ``fieldsV1`` the fields its writes changed (``f:<name>``; a list item of a keyed list as
``k:{"<key>":<value>}``, of a set as ``v:<value>``; any other list owned whole), taken from the entry that
owned them before; fields a write removes are owned by none; an entry left with no field goes. A write that
changes nothing changes no entry. The manager of a request is its ``fieldManager`` parameter, else the prefix
of its User-Agent before the first ``/`` (``kubectl``, ``OpenAPI-Generator``); of the sandbox's own writes,
the component that stands for it (kubelet, kube-controller-manager, kube-scheduler). A client's managedFields
in an update or patch are ignored (the current ones kept), as when a client sends them unchanged.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from nodecycle_sandbox.kube.meta import JsonObj, rfc3339
from nodecycle_sandbox.kube.resources import LEASES, NODES, PODS, ResourceType

Fields = dict[str, Any]

# metadata the server sets, never owned by a manager
_UNOWNED_METADATA = frozenset(
    {
        "managedFields",
        "name",  # the object's identity, not a field anyone manages
        "namespace",
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    }
)
# the keys of associative lists (patchMergeKey / listMapKeys): their items are owned one by one
_LIST_KEYS = ("name", "type", "uid", "key", "containerPort", "devicePath", "mountPath", "ip")
MAX_MANAGER_LENGTH = 128

_requests = threading.local()


def requested_by(manager: str) -> None:
    """The manager of the API request this thread serves from now on (the router sets it per request)."""
    _requests.manager = manager[:MAX_MANAGER_LENGTH]


def request_manager(query: Mapping[str, str], user_agent: str) -> str:
    return query.get("fieldManager") or user_agent.split("/", 1)[0]


def manager_of(rt: ResourceType, source: str, subresource: str) -> str:
    if source == "api":
        return str(getattr(_requests, "manager", ""))
    if rt in (NODES, LEASES) or (rt is PODS and subresource == "status"):
        return "kubelet"
    if subresource == "binding":
        return "kube-scheduler"
    return "kube-controller-manager"


def track(
    rt: ResourceType, old: JsonObj | None, new: JsonObj, *, source: str, subresource: str, now: float
) -> None:
    """Set ``new``'s managedFields from ``old``'s and what this write changed (``new`` is the store's)."""
    meta = new["metadata"]
    entries: list[JsonObj] = list(((old or {}).get("metadata") or {}).get("managedFields") or [])
    changed, removed = _diff(old or {}, new, top=True)
    if not changed and not removed:  # nothing of anyone's changed: no entry changes, not even its time
        if entries:
            meta["managedFields"] = entries
        else:
            meta.pop("managedFields", None)
        return
    if subresource == "binding":
        subresource = ""  # the scheduler's binding sets spec.nodeName in the pod itself
    manager = manager_of(rt, source, subresource)
    mine = {
        "manager": manager,
        "operation": "Update",
        "apiVersion": rt.api_version,
        "subresource": subresource,
    }
    kept: list[JsonObj] = []
    own: Fields = {}
    for entry in entries:
        fields = _subtract(_subtract(entry.get("fieldsV1") or {}, removed), changed)
        if _same_entry(entry, mine):
            own = fields
            continue
        if fields == (entry.get("fieldsV1") or {}):
            kept.append(entry)
        elif fields:
            kept.append({**entry, "fieldsV1": fields})
    own = _union(own, changed)
    if own:
        written = {
            "manager": manager,
            "operation": "Update",
            "apiVersion": rt.api_version,
            "time": rfc3339(now),
            "fieldsType": "FieldsV1",
            "fieldsV1": own,
        }
        if subresource:
            written["subresource"] = subresource
        kept.append(written)
    if kept:
        meta["managedFields"] = kept
    else:
        meta.pop("managedFields", None)


def _same_entry(entry: JsonObj, mine: JsonObj) -> bool:
    return (
        entry.get("manager") == mine["manager"]
        and entry.get("operation") == "Update"
        and entry.get("apiVersion") == mine["apiVersion"]
        and entry.get("subresource", "") == mine["subresource"]
    )


def _diff(old: Any, new: Any, *, top: bool = False) -> tuple[Fields, Fields]:
    """The fields ``new`` sets that ``old`` has not (or has otherwise), and those ``old`` has that ``new`` has
    not: two fieldsV1 trees."""
    changed: Fields = {}
    removed: Fields = {}
    for key, value in new.items():
        if top and key in ("apiVersion", "kind"):
            continue
        before = old.get(key, _MISSING)
        if before == value:
            continue
        if top and key == "metadata":
            value = {k: v for k, v in value.items() if k not in _UNOWNED_METADATA}
            before = {
                k: v
                for k, v in (before if isinstance(before, dict) else {}).items()
                if k not in _UNOWNED_METADATA
            }
            if before == value:
                continue
        sub_changed, sub_removed = _value_diff(before, value)
        if sub_changed is not None:
            changed[f"f:{key}"] = sub_changed
        if sub_removed:
            removed[f"f:{key}"] = sub_removed
    for key in old:
        if key not in new and not (top and key in ("apiVersion", "kind")):
            removed[f"f:{key}"] = {}
    return changed, removed


def _value_diff(before: Any, value: Any) -> tuple[Fields | None, Fields]:
    """What a changed value sets (None: nothing, as an emptied map) and what it no longer has."""
    if isinstance(value, dict):
        changed, removed = _diff(before if isinstance(before, dict) else {}, value)
        return (changed or None) if isinstance(before, dict) else changed, removed
    if isinstance(value, list):
        return _list_diff(before if isinstance(before, list) else [], value)
    return {}, {}


def _list_diff(before: list[Any], items: list[Any]) -> tuple[Fields | None, Fields]:
    if not items:
        return None, {}
    if not isinstance(items[0], dict):  # a set of scalars (finalizers) by value
        old, new = set(map(_repr, before)), list(map(_repr, items))
        gone = old - set(new)
        return {f"v:{v}": {} for v in new if v not in old} or None, {f"v:{v}": {} for v in gone}
    key = _list_key(items)
    if key is None:
        return {}, {}  # an atomic list: owned whole
    old_items = {_repr(i.get(key)): i for i in before if isinstance(i, dict)}
    changed: Fields = {}
    removed: Fields = {}
    for item in items:
        value = _repr(item.get(key))
        previous = old_items.pop(value, _MISSING)
        if previous == item:
            continue
        inner, inner_removed = _diff(previous if isinstance(previous, dict) else {}, item)
        name = f'k:{{"{key}":{value}}}'
        changed[name] = {".": {}, **inner}
        if inner_removed:
            removed[name] = inner_removed
    for value in old_items:
        removed[f'k:{{"{key}":{value}}}'] = {}
    return changed or None, removed


def _repr(value: Any) -> str:
    """A key's value as fieldsV1 writes it (JSON); names and types need no escaping, the common case."""
    if isinstance(value, str) and '"' not in value and "\\" not in value:
        return f'"{value}"'
    return json.dumps(value)


def _list_key(items: list[Any]) -> str | None:
    if not all(isinstance(i, dict) for i in items):
        return None
    return next((k for k in _LIST_KEYS if all(k in i for i in items)), None)


def _union(a: Fields, b: Fields) -> Fields:
    if not a:
        return b
    if not b:
        return a
    merged = dict(a)
    for key, value in b.items():
        merged[key] = _union(merged[key], value) if key in merged else value
    return merged


def _subtract(fields: Fields, taken: Fields) -> Fields:
    """``fields`` without the leaves of ``taken`` (a field whose children are all taken goes with them)."""
    if not taken or not fields:
        return fields
    result: Fields = {}
    for key, value in fields.items():
        if key not in taken:
            result[key] = value
            continue
        inner = taken[key]
        if not inner or not value:
            continue  # taken whole, or a leaf here set again
        rest = _subtract(value, inner)
        if rest and rest != {".": {}}:
            result[key] = rest
    return result


class _Missing:
    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return 0


_MISSING: Any = _Missing()
