"""What a drain keeps of each of its pods from one pass to the next, in its record: what it told of the pod (each
told once per drain), where the pod's last failed call puts it in the next pass's order, and since when its
evictions have got no answer of the pod's own.

One entry a pod, under one key of the record's ``extra``: ``uid -> [told, failed, since]``, its trailing empty
fields left out (most pods a drain keeps anything of are only told of: ``["b"]``). ``told`` holds a letter per
Event told; ``failed`` numbers the pod's last transient failure among the others' (the higher, the more recent;
0: none kept); ``since`` is an ISO time. A pod's uid is written once, whatever is kept of it (it was once a map
or list each).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

PODS = "pods"  # record.extra key

# What ``told`` may say
BLOCKED = "b"  # its eviction blocked by a PodDisruptionBudget, refused or deferred: EvictionBlocked, EvictionRefused,
# EvictionDeferred
FAILING = "f"  # its evictions failing at every try: EvictionFailing
DELETION = "d"  # its forced delete refused: DeletionRefused

# The keys before PODS, read once so that a drain under way when its function is updated keeps what it knew: the
# pods that failed (oldest failure first), those told blocked or refused ("<uid>") or failing
# ("<uid>/EvictionFailing"), since when evictions failed (uid -> time), those told their delete refused
_FAILED_PODS, _REPORTED, _FAILING_SINCE, _DELETION_REFUSED = (
    "failed_pods",
    "blocked_reported",
    "evictions_failing",
    "deletion_refused",
)


class PodNotes:
    def __init__(self, extra: dict[str, Any]) -> None:
        kept = extra.get(PODS)
        self._told: dict[str, str] = {}
        self._failed: dict[str, int] = {}
        self._since: dict[str, str] = {}
        if isinstance(kept, dict):
            for uid, note in kept.items():
                told, failed, since = [*note, *["", 0, ""][len(note) :]][:3]
                for kept_as, value in ((self._told, told), (self._failed, failed), (self._since, since)):
                    if value:
                        kept_as[uid] = value
        # (also beside PODS: while a function is updated, its old instances still answer for a while, and they
        # write the keys before into a record this version wrote, keeping PODS as it was)
        self._read_before(extra)

    def _read_before(self, extra: dict[str, Any]) -> None:
        last = max(self._failed.values(), default=0)  # (their failures came after those of PODS)
        for place, uid in enumerate(extra.get(_FAILED_PODS) or [], start=last + 1):
            self._failed[uid] = place
        for key in extra.get(_REPORTED) or []:
            uid, _, failing = str(key).partition("/")
            self.tell(uid, FAILING if failing else BLOCKED)
        for uid in extra.get(_DELETION_REFUSED) or []:
            self.tell(uid, DELETION)
        since = extra.get(_FAILING_SINCE)
        for uid, when in since.items() if isinstance(since, dict) else ():
            # (the earlier of the two: since when the pod's evictions have failed at every try)
            kept = self._since.get(uid)
            if kept is None or datetime.fromisoformat(str(when)) < datetime.fromisoformat(kept):
                self._since[uid] = str(when)

    def keep_only(self, uids: Iterable[str]) -> None:
        """Only the pods of ``uids`` are still asked: what is kept of the others goes (a pod's uid is never
        another's, so none is told of twice), and the record stays bounded by the pods on the node, not by all
        those a drain ever told of (a controller's new pods on the node, each blocked in turn)."""
        present = set(uids)
        for kept in (self._told, self._failed, self._since):
            for uid in [uid for uid in kept if uid not in present]:
                del kept[uid]

    # -- told ------------------------------------------------------------------------------------------

    def told(self, uid: str, what: str) -> bool:
        return what in self._told.get(uid, "")

    def tell(self, uid: str, what: str) -> None:
        if not self.told(uid, what):
            self._told[uid] = self._told.get(uid, "") + what

    # -- failed calls -----------------------------------------------------------------------------------

    def failure_order(self, uids: Iterable[str]) -> dict[str, int]:
        """The pods of ``uids`` whose last call failed, the more recent the failure the higher; the failures of
        the others (gone, or no longer asked) are forgotten."""
        present = set(uids)
        self._failed = {uid: n for uid, n in self._failed.items() if uid in present}
        return dict(self._failed)

    def failed(self, uid: str) -> None:
        """The pod's call failed now: the most recent failure."""
        self._failed[uid] = max(self._failed.values(), default=0) + 1

    def answered(self, uid: str) -> None:
        self._failed.pop(uid, None)

    # -- evictions failing at every try ---------------------------------------------------------------

    def stalled(self, uids: Iterable[str]) -> None:
        """Of the pods whose evictions have got no answer of their own, only ``uids`` still have none."""
        still = set(uids)
        self._since = {uid: since for uid, since in self._since.items() if uid in still}

    def stalled_since(self, uid: str, now: datetime) -> datetime:
        """Since when the pod's evictions have got no answer of its own (``now``: since this pass)."""
        return datetime.fromisoformat(self._since.setdefault(uid, now.isoformat()))

    # -- the record -----------------------------------------------------------------------------------

    def into(self, extra: dict[str, Any]) -> dict[str, Any]:
        """``extra`` with these notes (none: no key)."""
        kept = {
            key: value
            for key, value in extra.items()
            if key not in (PODS, _FAILED_PODS, _REPORTED, _FAILING_SINCE, _DELETION_REFUSED)
        }
        notes: dict[str, list[Any]] = {}
        for uid in sorted({*self._told, *self._failed, *self._since}):
            note: list[Any] = [self._told.get(uid, ""), self._failed.get(uid, 0), self._since.get(uid, "")]
            while note and not note[-1]:
                note.pop()
            if note:
                notes[uid] = note
        return {**kept, PODS: notes} if notes else kept
