"""The budget document: what the ``nodecycle-budget`` ConfigMap holds, and its JSON form.

One JSON document (ConfigMap key ``budget.json``), camelCase like the Kubernetes objects around it::

    {
      "formatVersion": 3,
      "holders": [{"node": "ip-10-0-1-7.ec2.internal", "instanceId": "i-0abc", "zone": "eu-west-1a",
                   "owner": "ng-blue", "recordId": "i-0abc/terminate/tok", "acquiredAt": "...Z",
                   "renewedAt": "...Z", "ttlSeconds": 300, "forced": false}],
      "waiters": [{"node": ..., "instanceId": ..., "zone": ..., "owner": ..., "recordId": ...,
                   "waitingSince": "...Z", "renewedAt": "...Z", "ttlSeconds": 300,
                   "inProgress": false, "urgentAt": null, "passed": 0}],
      "released": [{"node": ..., "owner": ..., "recordId": ..., "token": ..., "releasedAt": "...Z",
                    "ttlSeconds": 300}],
      "limits": {"ng-blue": {"maxUnavailable": "4", "maxUnavailablePerZone": "2",
                             "countUnavailable": false, "nodesInScope": 12,
                             "resolved": {"total": 4, "perZone": {"byZone": {"eu-west-1a": 2}, "other": 2}},
                             "unavailable": [], "updatedAt": "...Z"}}
    }

``waiters`` is in first-come order; who goes next is decided from their precedence (see :mod:`.rules`). ``limits`` holds each writer's own limits, resolved against its own
scope when it last wrote, and those of the nodes it counts as unavailable that can change a decision
(:func:`.limits.decisive_unavailable`): every writer evaluates another owner's
waiters with that owner's recorded limits, so all stacks agree on who is next (see :mod:`.rules`).
The budget holds at most ``MAX_WAITERS`` waiters, and takes no new one that would bring the document past
``MAX_DOCUMENT_BYTES`` (see :mod:`.rules`), so that it stays under the API server's 1 MiB limit for a
ConfigMap (a waiter takes 300-650 bytes); a forced slot that brings it past takes the places of the youngest
waiters of its stack. ``released`` remembers for one TTL the nodes whose slot was just given back: such a node stays cordoned
until its instance is gone, and must not be counted as "unavailable for another reason" meanwhile. It holds
one entry per lifecycle that gave a node's slot back, kept while another lifecycle holds the node again.

A reader refuses a document of a newer format rather than rewrite what it does not understand.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Annotated

import pydantic_core
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

# 2: waiters carry their precedence (inProgress, urgentAt, passed), holders may be forced. A stack that reads
# up to 1 refuses a document of format 2 rather than rewrite what it does not understand: upgrade every stack
# sharing the cluster (a format-1 document is read, and rewritten as format 2, by this version).
# 3: a released slot names the lifecycle that gave it back (``recordId`` and ``token``), which may not take it
# again; holders and waiters carry their lifecycle's ``token``. Again
# an older stack refuses the document rather than drop the field: upgrade every stack sharing the cluster
# (formats 1 and 2 are read, and rewritten as 3).
# 4: a holder may be seeded (see Holder.seeded): a stack that reads up to 3 would renew a seeded holder's slot
# without judging it. Only a document that holds one is written as 4 (for a TTL at most after the ConfigMap was
# created again); any other is written as 3, which every stack of format 3 reads.
FORMAT_VERSION = 4
_WITHOUT_SEEDED_HOLDERS = 3
# What no running stack writes, and no entry is kept for: a renewal further ahead of the reader's clock than any
# clock skew between containers (seconds at most; NTP keeps Lambda's within milliseconds), and a TTL longer than a
# day (a stack's holder TTL is minutes: the work queues' visibility timeout plus a few, see the template's
# BudgetHolderTtlSeconds; one of up to three days still renews, at a third of it, within a day). Such an entry comes
# from an edit by hand (a typo in the year) or a broken clock: taken at its word, it held its slot in every stack's
# view for years, and its own drain's renewals, "lately" renewed, wrote none (invariant 10). It expires now; a drain
# alive behind it asks again as one whose slot expired.
MAX_CLOCK_AHEAD = timedelta(minutes=10)
MAX_ENTRY_TTL = timedelta(days=1)
# How much older than its acquisition a holder passed on keeps its renewal at least (see Waiter.holding): stamps are
# written to the microsecond, and kept so by every store
_PASSED_BEFORE = timedelta(milliseconds=1)


def _on_utc(stamp: datetime) -> datetime:
    if stamp.tzinfo is None:
        # (written without an offset: by hand, or by a tool that drops it. Every writer stamps on UTC; kept naive,
        # its first comparison with the clock's time raised TypeError, at every decision of every owner)
        return stamp.replace(tzinfo=UTC)
    return stamp if stamp.tzinfo is UTC else stamp.astimezone(UTC)


# A stamp as read, on ``datetime.UTC``: parsed, each has a time zone object of its own (pydantic's), and every
# comparison or subtraction with another stamp or the clock's time (on UTC) then asks both their offsets, a Python
# call each. Read and compared by the hundred at each ask, that made an ask at 400 waiters 8.0 ms of CPU instead of
# 6.8 (benchmarks/bursts.py), and the longer a read-modify-write, the more of a burst's writers lose the race (409).
# The same instants; a stamp someone wrote with another offset is written back in UTC (one with none: taken as UTC).
Stamp = Annotated[datetime, AfterValidator(_on_utc)]


class BudgetFormatError(ValueError):
    """The stored budget document is not one this version of nodecycle can read."""


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True, alias_generator=to_camel, validate_by_name=True, validate_by_alias=True, extra="forbid"
    )


class _Entry(_Model):
    """What holders and waiters share: a node of a lifecycle record, renewed or forgotten."""

    node: str
    instance_id: str
    zone: str | None
    owner: str
    record_id: str
    token: str | None = None  # the lifecycle's token (see SlotRequest)
    renewed_at: Stamp
    ttl_seconds: int = Field(ge=1)

    @property
    def expires_at(self) -> datetime:
        return self.renewed_at + min(timedelta(seconds=self.ttl_seconds), MAX_ENTRY_TTL)

    def expired(self, now: datetime) -> bool:
        # (renewed further ahead than any clock runs: see MAX_CLOCK_AHEAD)
        return now >= self.expires_at or self.renewed_at > now + MAX_CLOCK_AHEAD


class Holder(_Entry):
    """A node that holds a slot: it may be cordoned and drained."""

    acquired_at: Stamp
    # Taken without room, because the node goes either way (its action's global timeout is near): it counts
    # against the limits like any holder, so the others wait for it.
    forced: bool = False
    # Seeded from its node's annotations into a document created again (see :mod:`.seed`), and not asked for by
    # its lifecycle since. It counts as any holder; but a node shows a drain in progress alike whether it held its
    # slot or had lost it (paused, in line), so at its lifecycle's next ask it keeps the slot only if it fits
    # beside every other holder, and otherwise waits in line as a drain that lost its slot (see
    # :func:`.rules.claim`): renewed as held, every paused drain would resume at once, past the limits.
    seeded: bool = False


class Waiter(_Entry):
    """A node that asked for a slot and found no room; it renews its entry each time it asks again."""

    waiting_since: Stamp
    in_progress: bool = False  # cordoned and partly drained already: its drain lost its slot
    urgent_at: Stamp | None = None  # from then on its action's global timeout is near: it goes first
    passed: int = 0  # how often a younger waiter took a slot while this one would have fit

    def holding(self, *, acquired_at: datetime) -> Holder:
        """This waiter's entry as a holder's, as of ``acquired_at`` (its renewal kept, but never later than
        ``acquired_at``). A holder passed on is told apart by a renewal older than its acquisition until its
        lifecycle renews it (see :func:`.rules.passed_on`); a waiter's renewal stamped by a container whose clock
        runs ahead of the passer's, by less than the store moves stamps for (CLOCK_TOLERANCE), can be later than
        the pass: taken then for a lifecycle that asked since, it was not woken again when its wake-up was lost,
        and its slot idled until its own retry. Moved back, its slot expires sooner by that skew at most."""
        entry = {name: getattr(self, name) for name in _Entry.model_fields}
        if self.renewed_at > acquired_at:
            entry["renewed_at"] = acquired_at - _PASSED_BEFORE
        return Holder(**entry, acquired_at=acquired_at)


class Released(_Model):
    """A node whose slot was given back: not "unavailable for another reason" until ``expires_at``, unless a
    slot of it was removed by another since (see :func:`.rules.counted_unavailable`); nor taken again by the
    lifecycle that gave it back (``record_id`` and ``token``: a late delivery of one of its steps), whoever
    holds the node since."""

    node: str
    owner: str
    # None: removed by another (the stop of its instance, the sweeper), or written before it was kept
    record_id: str | None = None
    token: str | None = None
    released_at: Stamp
    ttl_seconds: int = Field(ge=1)

    def expired(self, now: datetime) -> bool:
        return now >= self.released_at + timedelta(seconds=self.ttl_seconds)


class NodeRef(_Model):
    name: str
    zone: str | None


class ZoneLimits(_Model):
    by_zone: dict[str, int]  # zones that have nodes in scope
    other: int  # any other zone: no node in scope there (yet), or unknown

    def of(self, zone: str | None) -> int:
        return self.other if zone is None else self.by_zone.get(zone, self.other)


class ResolvedLimits(_Model):
    total: int
    per_zone: ZoneLimits | None  # None: no per-zone limit

    def zones(self) -> set[str]:
        return set(self.per_zone.by_zone) if self.per_zone else set()


class OwnerLimits(_Model):
    """One stack's limits as configured, resolved against its scope, and what it counts as unavailable."""

    max_unavailable: str
    max_unavailable_per_zone: str | None
    count_unavailable: bool
    nodes_in_scope: int | None  # None: not looked up (integer limits and no unavailable-node counting)
    resolved: ResolvedLimits
    unavailable: tuple[NodeRef, ...] = ()
    updated_at: Stamp


type Stamped = Holder | Waiter | Released | OwnerLimits  # what carries a writer's stamps


class BudgetDocument(_Model):
    format_version: int = FORMAT_VERSION
    holders: tuple[Holder, ...] = ()
    waiters: tuple[Waiter, ...] = ()
    released: tuple[Released, ...] = ()
    limits: dict[str, OwnerLimits] = Field(default_factory=dict)
    # Read from a ConfigMap that holds no document (never written: its first use, or deleted and created again
    # empty mid-refresh, its holders forgotten while their drains go on). Never stored: a store sets it, and the
    # budget's first write seeds such a document with the drains in progress its nodes show (see :mod:`.seed`).
    unwritten: bool = Field(default=False, exclude=True)
    # Read from a store object that no stack wrote it to, as the store tells: a ConfigMap restored from a backup,
    # or re-applied or edited with a document in it (a GitOps tool holding a snapshot of the live object, ``kubectl
    # apply`` of a saved manifest, ``kubectl edit``), however recently. (An older version's write is a stack's.)
    # Never stored. Its live entries stand as any
    # document's (its expired ones go, as ever), but what happened since it was written is in it nowhere: the drains
    # that began since go on evicting, counted nowhere. So the budget's first write seeds it as a document never
    # written (see :mod:`.seed`), before it decides anything.
    unvouched: bool = Field(default=False, exclude=True)
    # When the store's object was created (the ConfigMap's creationTimestamp, to the second), as read, or later, when a
    # document put there by another was found in it (a snapshot written back into it as it is); never stored. The
    # ``released`` marks of the slots given back before then, and the places in line of the waiters, went with the
    # object or document before it: see :func:`.rules.unmarked`, :func:`.rules._joined`. None: not told (a store that
    # never loses its document).
    created_at: datetime | None = Field(default=None, exclude=True)

    def entries(self) -> tuple[Holder | Waiter, ...]:
        return (*self.holders, *self.waiters)

    def on_clocks(self, ahead: Callable[[Stamped], timedelta]) -> BudgetDocument:
        """This document with the stamps its writers take from their own clocks (renewals, acquisitions, places in
        line, slots given back, limits' updates) moved, each entry's (and each owner's limits') by what ``ahead``
        tells of it: from the clock that stamped it to one that runs that much ahead of it. A store keeps each entry
        on its writer's clock, and gives them to a reader on its own (see the Kubernetes store): a holder stamped by
        a clock minutes behind the others' otherwise expired in their view while its drain ran. Not ``urgentAt``: a
        lifecycle's deadline, from its record, as the asks tell it."""

        def moved[E: (Holder, Waiter, Released, OwnerLimits)](entry: E, *names: str) -> E:
            by = ahead(entry)
            return (
                entry.model_copy(update={name: getattr(entry, name) + by for name in names}) if by else entry
            )

        return self.model_copy(
            update={
                "holders": tuple(moved(h, "renewed_at", "acquired_at") for h in self.holders),
                "waiters": tuple(moved(w, "renewed_at", "waiting_since") for w in self.waiters),
                "released": tuple(moved(r, "released_at") for r in self.released),
                "limits": {owner: moved(limits, "updated_at") for owner, limits in self.limits.items()},
            }
        )

    def last_stamped(self) -> datetime | None:
        """The newest time a writer stamped in the document: an entry's renewal or acquisition, a slot given back,
        an owner's limits (which every write records). None: no stamp at all (no writer's document)."""
        stamps = [
            *(h.acquired_at for h in self.holders),
            *(e.renewed_at for e in self.entries()),
            *(r.released_at for r in self.released),
            *(limits.updated_at for limits in self.limits.values()),
        ]
        return max(stamps, default=None)

    def holder(self, node: str) -> Holder | None:
        return next((h for h in self.holders if h.node == node), None)

    def waiter(self, node: str) -> Waiter | None:
        return next((w for w in self.waiters if w.node == node), None)

    def to_json(self) -> str:
        """The document as stored: in this version's format (an older format read is written as this one; as
        3 while no holder is seeded), compact (fields at their defaults left out, no spaces): the API server
        refuses a ConfigMap over 1 MiB, and the document is read and rewritten on every decision."""
        data = self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        data = {
            "formatVersion": self.written_format(),
            "holders": [],
            "waiters": [],
            "released": [],
            "limits": {},
            **{key: value for key, value in data.items() if key != "formatVersion"},
        }
        return json.dumps(data, separators=(",", ":"))

    def written_format(self) -> int:
        """The format :meth:`to_json` writes this document in: 4 only while a holder is seeded."""
        return FORMAT_VERSION if any(h.seeded for h in self.holders) else _WITHOUT_SEEDED_HOLDERS

    @staticmethod
    def entry_bytes(entry: Holder | Waiter | Released) -> int:
        """What ``entry`` takes in :meth:`to_json`'s text: its own JSON and the comma that separates it."""
        data = entry.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        return len(json.dumps(data, separators=(",", ":"))) + 1

    @classmethod
    def from_json(cls, text: str) -> BudgetDocument:
        try:
            # (pydantic's parser: a fourth of json.loads' CPU for the document every decision reads)
            data = pydantic_core.from_json(text)
        except ValueError as error:
            raise BudgetFormatError(f"the budget document is not JSON: {error}") from None
        version = data.get("formatVersion") if isinstance(data, dict) else None
        if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
            raise BudgetFormatError(
                f"budget document format {version!r} is not supported (this nodecycle reads up to "
                f"{FORMAT_VERSION}); upgrade this stack"
            )
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise BudgetFormatError(f"invalid budget document: {error}") from None
