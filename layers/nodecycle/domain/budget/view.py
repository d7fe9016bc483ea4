"""A read-only picture of the budget for people and dashboards: ages instead of timestamps, per zone."""

from __future__ import annotations

from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from nodecycle.domain.budget.document import BudgetDocument
from nodecycle.domain.budget.rules import counted_unavailable, eligible_waiters, prune, queue_order


class _View(BaseModel):
    model_config = ConfigDict(frozen=True)


class HolderView(_View):
    node: str
    instance_id: str
    zone: str | None
    owner: str
    record_id: str
    forced: bool  # taken without room: its action's global timeout was near
    seeded: (
        bool  # seeded into a ConfigMap created again, not asked for since (kept at that ask only if it fits)
    )
    held_seconds: float
    renewed_seconds_ago: float
    expires_in_seconds: float  # <= 0: expired, the next writer removes it


class WaiterView(_View):
    position: int
    node: str
    instance_id: str
    zone: str | None
    owner: str
    record_id: str
    waiting_seconds: float
    expires_in_seconds: float
    eligible: bool  # gets the next slot it asks for
    in_progress: bool  # cordoned and partly drained: its drain lost its slot (goes first)
    urgent: bool  # its action's global timeout is near (goes next)
    passed: int  # how often a younger waiter went before it


class LimitsView(_View):
    owner: str
    max_unavailable: str
    max_unavailable_per_zone: str | None
    count_unavailable: bool
    nodes_in_scope: int | None
    total: int  # resolved
    per_zone: dict[str, int] | None  # resolved, zones with nodes in scope; None: no per-zone limit
    other_zones: int | None  # resolved, any other zone
    # nodes counted as unavailable for other reasons: all of this owner's; another owner's as it recorded them, those
    # that can change a decision (see limits.decisive_unavailable)
    unavailable: list[str]
    updated_seconds_ago: float


class ZoneView(_View):
    zone: str | None  # None: nodes without a zone label, which count against every zone
    holders: int
    waiters: int
    limits: dict[str, int]  # per owner that limits zones


class BudgetView(_View):
    format_version: int
    holders: list[HolderView]
    waiters: list[WaiterView]
    zones: list[ZoneView]
    limits: list[LimitsView]


def view_of(doc: BudgetDocument, now: datetime) -> BudgetView:
    """Every entry of ``doc``, expired ones included (they show a negative ``expires_in_seconds``)."""
    live = prune(doc, now)
    eligible = {w.node for w in eligible_waiters(live, now)}
    holders = [
        HolderView(
            node=h.node,
            instance_id=h.instance_id,
            zone=h.zone,
            owner=h.owner,
            record_id=h.record_id,
            forced=h.forced,
            seeded=h.seeded,
            held_seconds=_seconds(now - h.acquired_at),
            renewed_seconds_ago=_seconds(now - h.renewed_at),
            expires_in_seconds=_seconds(h.expires_at - now),
        )
        for h in doc.holders
    ]
    waiters = [
        WaiterView(
            position=position,
            node=w.node,
            instance_id=w.instance_id,
            zone=w.zone,
            owner=w.owner,
            record_id=w.record_id,
            waiting_seconds=_seconds(now - w.waiting_since),
            expires_in_seconds=_seconds(w.expires_at - now),
            eligible=w.node in eligible,
            in_progress=w.in_progress,
            urgent=w.urgent_at is not None and now >= w.urgent_at,
            passed=w.passed,
        )
        for position, w in enumerate(
            [*queue_order(live, now), *(w for w in doc.waiters if w.expired(now))], start=1
        )
    ]
    limits = [
        LimitsView(
            owner=owner,
            max_unavailable=entry.max_unavailable,
            max_unavailable_per_zone=entry.max_unavailable_per_zone,
            count_unavailable=entry.count_unavailable,
            nodes_in_scope=entry.nodes_in_scope,
            total=entry.resolved.total,
            per_zone=None if entry.resolved.per_zone is None else dict(entry.resolved.per_zone.by_zone),
            other_zones=None if entry.resolved.per_zone is None else entry.resolved.per_zone.other,
            unavailable=sorted(counted_unavailable(live, entry)),
            updated_seconds_ago=_seconds(now - entry.updated_at),
        )
        for owner, entry in sorted(doc.limits.items())
    ]
    return BudgetView(
        # (a document never written, which a ConfigMap shipped empty holds, in the format its first write takes)
        format_version=doc.written_format() if doc.unwritten else doc.format_version,
        holders=holders,
        waiters=waiters,
        zones=_zones(live),
        limits=limits,
    )


def _zones(live: BudgetDocument) -> list[ZoneView]:
    names: set[str | None] = {h.zone for h in live.holders} | {w.zone for w in live.waiters}
    for entry in live.limits.values():
        names |= entry.resolved.zones()
    views = []
    for zone in sorted(names, key=lambda z: (z is None, z or "")):
        limits = {
            owner: entry.resolved.per_zone.of(zone)
            for owner, entry in sorted(live.limits.items())
            if entry.resolved.per_zone is not None
        }
        views.append(
            ZoneView(
                zone=zone,
                holders=sum(1 for h in live.holders if h.zone == zone),
                waiters=sum(1 for w in live.waiters if w.zone == zone),
                limits=limits,
            )
        )
    return views


def _seconds(delta: timedelta) -> float:
    return round(delta.total_seconds(), 1)
