"""What the sandbox recorded, in the shapes the benchmarks reason about: each drain's wait, cordon and
completion (API server history + emulated lifecycle actions) and the budget ConfigMap's successive contents.

The budget document is read as plain JSON, not through nodecycle's own model: the benchmark checks what was
written, whatever the product believes it wrote."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from nodecycle_sandbox.aws.records import TERMINATING, ActionRecord
from nodecycle_sandbox.checks import last_pod_gone, nodes_of_instances
from nodecycle_sandbox.kube import HistoryEntry

BUDGET_NAMESPACE = "nodecycle"  # the template's default BudgetNamespace
BUDGET_NAME = "nodecycle-budget"
BUDGET_KEY = "budget.json"
WRITTEN_KEY = "budget.written"  # what the stack notes of its last write (adapters/kube/budget.py)
BUDGET_FIELD_MANAGER = "nodecycle"  # whom the API server records the stack's writes under (same)


@dataclass(frozen=True)
class Drain:
    """One terminating node, from the records: when it could have taken a slot, when it took one (its cordon)
    and when it gave it back (its terminate action was completed)."""

    node: str
    zone: str
    waiting_at: float  # the terminate action started
    cordoned_at: float
    done_at: float

    @property
    def duration(self) -> float:
        return self.done_at - self.cordoned_at


def cordon_times(history: Iterable[HistoryEntry]) -> dict[str, float]:
    """Node -> the first write that left it cordoned."""
    found: dict[str, float] = {}
    for entry in history:
        if entry.kind == "Node" and entry.unschedulable and not entry.removed:
            found.setdefault(entry.name, entry.time)
    return found


def node_zones(history: Iterable[HistoryEntry]) -> dict[str, str]:
    return {entry.name: entry.zone for entry in history if entry.kind == "Node" and entry.zone}


def drains(history: Sequence[HistoryEntry], actions: Iterable[ActionRecord]) -> list[Drain]:
    """The drains of the completed terminate actions whose node was cordoned, in cordon order."""
    nodes = nodes_of_instances(history)
    cordons = cordon_times(history)
    zones = node_zones(history)
    found = []
    for action in actions:
        node = nodes.get(action.instance_id)
        if action.transition != TERMINATING or action.finished_at is None or node not in cordons:
            continue
        found.append(Drain(node, zones[node], action.started_at, cordons[node], action.finished_at))
    return sorted(found, key=lambda drain: drain.cordoned_at)


def emptied_at(history: Sequence[HistoryEntry], drain: Drain) -> float | None:
    """When the last drainable pod (not a DaemonSet's or a mirror pod) left the drain's node, up to the drain's
    completion; None when no such pod was seen leaving."""
    return last_pod_gone([entry for entry in history if entry.time <= drain.done_at], drain.node) or None


@dataclass(frozen=True)
class Entry:
    node: str
    zone: str | None
    owner: str


@dataclass(frozen=True)
class Limits:
    total: int
    per_zone: dict[str, int] | None  # None: no per-zone limit
    other_zone: int

    def zone_limit(self, zone: str | None) -> int | None:
        if self.per_zone is None:
            return None
        return self.other_zone if zone is None else self.per_zone.get(zone, self.other_zone)


@dataclass(frozen=True)
class BudgetWrite:
    """The budget document as one write left it."""

    time: float
    holders: tuple[Entry, ...]
    waiters: tuple[Entry, ...]  # first come first
    limits: dict[str, Limits]  # by owner, as each owner resolved its own

    def holder_nodes(self) -> set[str]:
        return {holder.node for holder in self.holders}

    def eligible_waiters(self) -> list[Entry]:
        """Waiters that would get a slot if they asked now: room in all and in their zone, by their owner's
        limits (all owners' holders count against them)."""
        in_zone = Counter(holder.zone for holder in self.holders)
        eligible = []
        for waiter in self.waiters:
            limits = self.limits.get(waiter.owner)
            if limits is None or len(self.holders) >= limits.total:
                continue
            zone_limit = limits.zone_limit(waiter.zone)
            if zone_limit is None or in_zone[waiter.zone] < zone_limit:
                eligible.append(waiter)
        return eligible


def budget_writes(history: Iterable[HistoryEntry]) -> list[BudgetWrite]:
    writes = []
    for entry in history:
        if entry.kind != "ConfigMap" or (entry.namespace, entry.name) != (BUDGET_NAMESPACE, BUDGET_NAME):
            continue
        doc = {} if entry.removed else json.loads((entry.object.get("data") or {}).get(BUDGET_KEY, "{}"))
        writes.append(
            BudgetWrite(
                time=entry.time,
                holders=tuple(_entry(raw) for raw in doc.get("holders", [])),
                waiters=tuple(_entry(raw) for raw in doc.get("waiters", [])),
                limits={owner: _limits(raw["resolved"]) for owner, raw in (doc.get("limits") or {}).items()},
            )
        )
    return writes


def arrival_order(writes: Iterable[BudgetWrite]) -> list[str]:
    """Nodes in the order they first entered the budget (as a holder or a waiter): first come, first served."""
    order: dict[str, None] = {}
    for write in writes:
        for entry in (*write.holders, *write.waiters):
            order.setdefault(entry.node, None)
    return list(order)


def _entry(raw: dict[str, object]) -> Entry:
    zone = raw.get("zone")
    return Entry(str(raw["node"]), None if zone is None else str(zone), str(raw["owner"]))


def _limits(resolved: dict[str, object]) -> Limits:
    per_zone = resolved.get("perZone")
    total = resolved["total"]
    assert isinstance(total, int)
    if not isinstance(per_zone, dict):
        return Limits(total, None, 0)
    return Limits(total, {str(z): int(n) for z, n in per_zone["byZone"].items()}, int(per_zone["other"]))
