"""The budget's decisions: pure functions of a document, a request and the time.

**Expiry.** A holder or waiter is stale once ``renewedAt + ttlSeconds`` is reached. Stale entries do not
count, and every writer removes them (of every owner) before it decides anything. The sweeper removes also
its own entries whose node or instance is gone or whose lifecycle record is finished.

**What takes a slot.** The *occupancy* an owner sees is: every live holder, of every owner, in scope or not;
plus, when that owner counts unavailable nodes, the nodes in its scope that are unschedulable or NotReady,
unless a holder has them or their slot was released less than a TTL ago (the drained node stays cordoned
until its instance is gone). A node counts once however many reasons it has. An owner's limits (total, and
per zone) bound the occupancy it sees.

**Zones.** A node whose zone is unknown might be in any zone, so it counts against every zone: the load of
zone Z is its nodes plus the nodes of unknown zone. Granting an unknown-zone node needs room in every zone
(those with nodes in scope, those of the occupants, and one more zone with no node in scope at all).

**Eligibility (first come, first served, work-conserving).** Replay the live waiters oldest first, starting
from the occupancy of live holders; grant each waiter that still fits, under *its own owner's* recorded
limits and unavailable nodes, and add it to the occupancy; skip (do not stop at) a waiter that does not fit.
The waiters granted in this replay are *eligible*. A request is granted only when it is eligible: a
newcomer joins the end of the queue first, so it never overtakes an older waiter that fits, while a younger
waiter whose zone has room does pass an older one whose zone is full. Because every owner replays the same
document with the same recorded limits, all stacks agree on who is next, and a slot an eligible waiter of
another stack is owed stays free for it (it takes it at its next retry) instead of going to a younger one.

**Holders.** One holder per node: a node that holds a slot and asks again holds it again (renewed; taken
over by a new lifecycle of the same node). A renewal is written only when a third of the TTL has passed since
the last written one. A holder that expired and was removed asks again like a newcomer, through the queue. A
node already counted as unavailable takes its slot without taking a new one.

A node that is held or queued by another owner is handed off, never taken (invariant 3), until that entry
expires.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from nodecycle.domain.budget.document import (
    BudgetDocument,
    Holder,
    OwnerLimits,
    Released,
    ResolvedLimits,
    Waiter,
)
from nodecycle.domain.budget.requests import SlotDecision, SlotReason, SlotRequest

# A renewal is written once a third of the holder's TTL has passed since the last written one, so after any
# renewal a holder has at least two thirds of its TTL left.
RENEWALS_PER_TTL = 3
# How long the limits of a stack with no holder and no waiter stay in the document (for `budget show`).
LIMITS_RETENTION = timedelta(days=1)


def prune(doc: BudgetDocument, now: datetime) -> BudgetDocument:
    """The document without expired entries; ``doc`` itself when nothing expired."""
    holders = tuple(h for h in doc.holders if not h.expired(now))
    waiters = tuple(w for w in doc.waiters if not w.expired(now))
    held = {h.node for h in holders}
    released = tuple(r for r in doc.released if not r.expired(now) and r.node not in held)
    active = {h.owner for h in holders} | {w.owner for w in waiters}
    limits = {
        owner: entry
        for owner, entry in doc.limits.items()
        if owner in active or now - entry.updated_at < LIMITS_RETENTION
    }
    if (
        len(holders) == len(doc.holders)
        and len(waiters) == len(doc.waiters)
        and len(released) == len(doc.released)
        and len(limits) == len(doc.limits)
    ):
        return doc
    return doc.model_copy(
        update={"holders": holders, "waiters": waiters, "released": released, "limits": limits}
    )


class Occupancy:
    """The nodes that take a slot, with their zones."""

    def __init__(self, nodes: dict[str, str | None]) -> None:
        self._nodes = nodes

    def admits(self, node: str, zone: str | None, limits: ResolvedLimits) -> bool:
        """Whether ``node`` may take a slot under ``limits``; a node already counted takes no new one."""
        if node in self._nodes:
            return True
        if len(self._nodes) >= limits.total:
            return False
        per_zone = limits.per_zone
        if per_zone is None:
            return True
        if zone is not None:
            return self.load(zone) < per_zone.of(zone)
        known = {z for z in self._nodes.values() if z is not None} | limits.zones()
        # None stands for a zone with no node in scope (its limit is ``other``): the unknown node may be there
        return all(self.load(z) < per_zone.of(z) for z in (*known, None))

    def load(self, zone: str | None) -> int:
        """Nodes in ``zone`` plus those of unknown zone (``zone=None``: those of unknown zone only)."""
        return sum(1 for z in self._nodes.values() if z is None or z == zone)


def counted_unavailable(doc: BudgetDocument, limits: OwnerLimits) -> dict[str, str | None]:
    """The unavailable nodes an owner counts, without those held or just released."""
    skip = {h.node for h in doc.holders} | {r.node for r in doc.released}
    return {n.name: n.zone for n in limits.unavailable if n.name not in skip}


def eligible_waiters(doc: BudgetDocument) -> list[Waiter]:
    """The waiters that get a slot, in order (see the module docstring). ``doc`` must be pruned."""
    granted = {h.node: h.zone for h in doc.holders}
    held = set(granted)
    eligible = []
    for waiter in doc.waiters:
        limits = doc.limits.get(waiter.owner)
        if waiter.node in held or limits is None:
            continue
        taken = Occupancy({**counted_unavailable(doc, limits), **granted})
        if taken.admits(waiter.node, waiter.zone, limits.resolved):
            granted[waiter.node] = waiter.zone
            eligible.append(waiter)
    return eligible


def with_own_limits(doc: BudgetDocument, owner: str, limits: OwnerLimits) -> BudgetDocument:
    return doc.model_copy(update={"limits": {**doc.limits, owner: limits}})


def fresh_holder(doc: BudgetDocument, request: SlotRequest, now: datetime) -> SlotDecision | None:
    """The decision for a request whose lifecycle holds the node and renewed it less than a third of its TTL
    ago: granted, with nothing to write. A drain renews at every step (every few seconds); writing each time
    would only make the shared document change faster and the acquirers conflict more. ``None`` when the
    renewal must be written."""
    if not _renewed_lately(doc.holder(request.node), request, now):
        return None
    return _decision(prune(doc, now), True, SlotReason.HELD)


def fresh_waiter(
    doc: BudgetDocument, request: SlotRequest, now: datetime, *, renewing: bool
) -> SlotDecision | None:
    """The decision for a request whose lifecycle waits for the node, renewed its place less than a third of
    its TTL ago, and still does not get a slot: denied, with nothing to write. Waiters retry every
    ``BudgetRetrySeconds``; writing each time would churn the shared document as much as the drains do.
    ``None`` when the request must be written (the entry needs its renewal, or it gets a slot now)."""
    if not _renewed_lately(doc.waiter(request.node), request, now):
        return None
    live = prune(doc, now)
    if doc.holder(request.node) is not None or any(w.node == request.node for w in eligible_waiters(live)):
        return None
    position = next(i for i, w in enumerate(live.waiters, start=1) if w.node == request.node)
    return _decision(live, False, SlotReason.LOST if renewing else SlotReason.NO_ROOM, position)


def _renewed_lately(entry: Holder | Waiter | None, request: SlotRequest, now: datetime) -> bool:
    """Whether ``entry`` is this request's lifecycle's, renewed less than a third of its TTL ago."""
    return (
        entry is not None
        and (entry.owner, entry.record_id, entry.instance_id)
        == (request.owner, request.record_id, request.instance_id)
        and now - entry.renewed_at < timedelta(seconds=entry.ttl_seconds) / RENEWALS_PER_TTL
    )


def claim(
    doc: BudgetDocument, request: SlotRequest, *, now: datetime, ttl: timedelta, renewing: bool
) -> tuple[BudgetDocument, SlotDecision, timedelta | None]:
    """Acquire or renew a slot for ``request``; returns the new document, the decision, and how long the
    node had been waiting when it is granted after waiting. ``doc`` must be pruned and carry the owner's
    current limits."""
    ttl_seconds = int(ttl.total_seconds())
    renewal: dict[str, Any] = {
        "instance_id": request.instance_id,
        "zone": request.zone,
        "record_id": request.record_id,
        "renewed_at": now,
        "ttl_seconds": ttl_seconds,
    }
    holder = doc.holder(request.node)
    if holder is not None:
        if holder.owner != request.owner:
            return doc, _decision(doc, False, SlotReason.HELD_BY_OTHER_OWNER), None
        holders = tuple(h.model_copy(update=renewal) if h is holder else h for h in doc.holders)
        doc = doc.model_copy(update={"holders": holders})
        return doc, _decision(doc, True, SlotReason.HELD), None

    waiter = doc.waiter(request.node)
    if waiter is not None and waiter.owner != request.owner:
        return doc, _decision(doc, False, SlotReason.CLAIMED_BY_OTHER_OWNER), None
    if waiter is None:
        entry = Waiter(node=request.node, owner=request.owner, waiting_since=now, **renewal)
        waiters = (*doc.waiters, entry)
    else:
        entry = waiter.model_copy(update=renewal)
        waiters = tuple(entry if w is waiter else w for w in doc.waiters)
    doc = doc.model_copy(update={"waiters": waiters})

    if not any(w.node == request.node for w in eligible_waiters(doc)):
        reason = SlotReason.LOST if renewing else SlotReason.NO_ROOM
        position = next(i for i, w in enumerate(doc.waiters, start=1) if w.node == request.node)
        return doc, _decision(doc, False, reason, position), None

    granted = Holder(node=request.node, owner=request.owner, acquired_at=now, **renewal)
    doc = doc.model_copy(
        update={
            "holders": (*doc.holders, granted),
            "waiters": tuple(w for w in doc.waiters if w.node != request.node),
            "released": tuple(r for r in doc.released if r.node != request.node),
        }
    )
    reason = SlotReason.REACQUIRED if renewing else SlotReason.GRANTED
    waited = now - entry.waiting_since if waiter is not None else None
    return doc, _decision(doc, True, reason), waited


def release(
    doc: BudgetDocument,
    node: str,
    owner: str,
    *,
    now: datetime,
    ttl: timedelta,
    record_id: str | None = None,
) -> tuple[BudgetDocument, Holder | None, Waiter | None]:
    """Remove ``owner``'s holder and waiter of ``node`` (only those of ``record_id`` when given); returns
    the document and what was removed. ``doc`` must be pruned."""

    def mine(entry: Holder | Waiter | None) -> bool:
        return (
            entry is not None and entry.owner == owner and (record_id is None or entry.record_id == record_id)
        )

    holder = doc.holder(node)
    holder = holder if mine(holder) else None
    waiter = doc.waiter(node)
    waiter = waiter if mine(waiter) else None
    if holder is None and waiter is None:
        return doc, None, None
    released = doc.released
    if holder is not None:
        tombstone = Released(node=node, owner=owner, released_at=now, ttl_seconds=int(ttl.total_seconds()))
        released = (*(r for r in released if r.node != node), tombstone)
    doc = doc.model_copy(
        update={
            "holders": tuple(h for h in doc.holders if h is not holder),
            "waiters": tuple(w for w in doc.waiters if w is not waiter),
            "released": released,
        }
    )
    return doc, holder, waiter


def force_release(doc: BudgetDocument, holder: Holder) -> BudgetDocument:
    """The operator's escape hatch: remove exactly ``holder`` (same node and record), whoever owns it.

    No ``released`` entry: the node is still cordoned by a drain that may be stuck, so to an owner counting
    unavailable nodes it is unavailable, until someone uncordons it. A drain still running takes a slot
    again at its next renewal when there is room, and otherwise pauses.
    """
    return doc.model_copy(
        update={
            "holders": tuple(
                h for h in doc.holders if not (h.node == holder.node and h.record_id == holder.record_id)
            )
        }
    )


def _decision(
    doc: BudgetDocument, granted: bool, reason: SlotReason, position: int | None = None
) -> SlotDecision:
    return SlotDecision(
        granted=granted, reason=reason, holders=len(doc.holders), waiting=len(doc.waiters), position=position
    )
