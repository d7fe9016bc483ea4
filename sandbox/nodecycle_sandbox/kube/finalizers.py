"""Finalizers, as kube-apiserver honours them: an object that still has ``metadata.finalizers`` is only
marked for deletion (``deletionTimestamp``); it goes once an update removes the last of them.

A pod ends in two parts: its containers stop (the kubelet, within the grace period; at once with grace 0,
a force delete), then the object goes, finalizers permitting. A pod whose kubelet is done, or which was
force-deleted, has ``deletionGracePeriodSeconds: 0``; until then a removed finalizer does not end it.
"""

from __future__ import annotations

import time

from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.meta import (
    JsonObj,
    is_terminating,
    json_copy,
    metadata,
    name_of,
    parse_rfc3339,
    rfc3339,
)
from nodecycle_sandbox.kube.resources import PODS, ResourceType


def pending(obj: JsonObj) -> bool:
    """The object has finalizers: a deletion only marks it."""
    return bool(metadata(obj).get("finalizers"))


def marked(obj: JsonObj, grace: int, now: float | None = None) -> JsonObj:
    """A copy marked for deletion ``grace`` seconds from now. A deletion in progress keeps its timestamp
    unless the new grace is shorter, and its grace period only ever shrinks (as kube-apiserver does)."""
    moment = time.time() if now is None else now
    updated = json_copy(obj)
    meta = updated["metadata"]
    current = meta.get("deletionGracePeriodSeconds")
    if current is None or not meta.get("deletionTimestamp"):
        meta["deletionTimestamp"] = rfc3339(moment + grace)
        meta["deletionGracePeriodSeconds"] = grace
    elif grace < int(current):
        meta["deletionTimestamp"] = shortened(meta, grace)
        meta["deletionGracePeriodSeconds"] = grace
    return updated


def shortened(meta: JsonObj, grace: int) -> str:
    """The deadline of a deletion in progress given a shorter grace: kube-apiserver's BeforeDelete moves it
    back by the old grace and forward by the new one, so it counts from when the deletion was first asked (a
    kubelet's final delete, grace 0, makes it that moment), not from the later request."""
    asked = parse_rfc3339(str(meta["deletionTimestamp"])) - int(meta["deletionGracePeriodSeconds"])
    return rfc3339(asked + grace)


def stopped(obj: JsonObj) -> bool:
    """Nothing runs for it any more: its kubelet finished it, or it was force-deleted."""
    return is_terminating(obj) and int(metadata(obj).get("deletionGracePeriodSeconds", 1)) == 0


def complete(rt: ResourceType, obj: JsonObj) -> bool:
    """Marked for deletion, without finalizers, and (a pod) stopped: the object goes now."""
    if not is_terminating(obj) or pending(obj):
        return False
    return rt is not PODS or stopped(obj)


def check_update(rt: ResourceType, current: JsonObj, new: JsonObj) -> None:
    """No finalizer may be added to an object being deleted (kube-apiserver answers 422 Forbidden)."""
    if not is_terminating(current):
        return
    before = set(metadata(current).get("finalizers") or [])
    added = sorted(set(metadata(new).get("finalizers") or []) - before)
    if added:
        raise errors.invalid(
            rt,
            name_of(current),
            "metadata.finalizers",
            f"Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers {added}",
        )
