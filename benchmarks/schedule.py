"""Ideal schedules of drains under a budget (a global and a per-zone limit), and the idle slots of a real one.

Pure functions of measured durations and times, so that the ideal is built from exactly the drains that ran.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from benchmarks.records import Drain


@dataclass(frozen=True)
class Budget:
    total: int
    per_zone: int


def lower_bound(drains: Sequence[Drain], budget: Budget) -> float:
    """No schedule can be shorter: all the drain time spread over every slot, each zone's over its own slots,
    and the longest drain."""
    by_zone: dict[str, float] = {}
    for drain in drains:
        by_zone[drain.zone] = by_zone.get(drain.zone, 0.0) + drain.duration
    return max(
        sum(drain.duration for drain in drains) / budget.total,
        max(seconds / budget.per_zone for seconds in by_zone.values()),
        max(drain.duration for drain in drains),
    )


def greedy_makespan(drains: Sequence[Drain], budget: Budget, *, balance_zones: bool = False) -> float:
    """An achievable ideal: the same drains, in the given (arrival) order, each starting the instant a slot with
    room in its zone is free, as the design's budget hands slots out (first come, first served, but a younger
    waiter of a zone with room goes before an older one whose zone is full), with no hand-over latency.

    ``balance_zones``: of the drains that fit, the first of the zone with the most drains left goes first (a
    policy to compare with: it keeps the last drains from piling up in one zone's two slots)."""
    starts = greedy_starts(drains, budget, balance_zones=balance_zones)
    return max((starts[drain.node] + drain.duration for drain in drains), default=0.0)


def greedy_starts(
    drains: Sequence[Drain], budget: Budget, *, balance_zones: bool = False
) -> dict[str, float]:
    """When each drain starts in :func:`greedy_makespan`'s schedule (seconds from the first start): with every
    node waiting from the start, its wait for a slot."""
    pending = list(drains)
    running: list[tuple[float, str]] = []  # (end, zone)
    starts: dict[str, float] = {}
    now = 0.0
    while pending or running:
        while fits := [drain for drain in pending if _fits(drain.zone, running, budget)]:
            left = Counter(drain.zone for drain in pending)
            chosen = max(fits, key=lambda drain: left[drain.zone]) if balance_zones else fits[0]
            running.append((now + chosen.duration, chosen.zone))
            starts[chosen.node] = now
            pending.remove(chosen)
        now = min(end for end, _ in running)
        running = [(end, zone) for end, zone in running if end > now]
    return starts


def _fits(zone: str, running: list[tuple[float, str]], budget: Budget) -> bool:
    in_zone = sum(1 for _, other in running if other == zone)
    return len(running) < budget.total and in_zone < budget.per_zone


def best_packing_found(drains: Sequence[Drain], budget: Budget, *, orders: int = 1000) -> float:
    """The shortest greedy schedule over many orders of the same drains (longest first, and random ones): an
    achievable packing that no online scheduler could plan for (it needs every duration in advance). The
    optimal packing lies between :func:`lower_bound` and this."""
    shuffler = random.Random(0)  # the same orders on every run
    longest_first = sorted(drains, key=lambda drain: -drain.duration)
    best = greedy_makespan(longest_first, budget)
    for _ in range(orders):
        best = min(best, greedy_makespan(shuffler.sample(list(drains), len(drains)), budget))
    return best


def idle_gaps(drains: Sequence[Drain], budget: Budget, start: float, end: float) -> list[tuple[float, float]]:
    """The stretches of [start, end] during which *some* slot was free, in all and in the zone of a node that
    was waiting for one (its terminate action had started, it was not cordoned yet). Consecutive moments are
    merged whichever slot was free in each, so with many slots many short hand-overs chain into one long
    stretch: how long one slot stood idle is :func:`benchmarks.wake.handovers`' measure, not this."""
    gaps: list[tuple[float, float]] = []
    for begin, finish, usable in _usable_free_slots(drains, budget, start, end):
        if not usable:
            continue
        if gaps and gaps[-1][1] == begin:
            gaps[-1] = (gaps[-1][0], finish)
        else:
            gaps.append((begin, finish))
    return gaps


def idle_slot_seconds(drains: Sequence[Drain], budget: Budget, start: float, end: float) -> float:
    """Slot-seconds of [start, end] lost to hand-overs: at each moment, the slots that were free and that a
    waiting node could have taken (room in all and in its zone, at most one per such node), summed over time."""
    return sum(
        (finish - begin) * usable for begin, finish, usable in _usable_free_slots(drains, budget, start, end)
    )


def _usable_free_slots(
    drains: Sequence[Drain], budget: Budget, start: float, end: float
) -> list[tuple[float, float, int]]:
    """[start, end] cut at every change, each piece with how many free slots waiting nodes could have taken."""
    moments = {start, end}
    for drain in drains:
        moments.update(t for t in (drain.waiting_at, drain.cordoned_at, drain.done_at) if start < t < end)
    pieces = []
    for begin, finish in pairwise(sorted(moments)):
        middle = (begin + finish) / 2  # nothing changes between two consecutive moments
        holding = [d for d in drains if d.cordoned_at <= middle < d.done_at]
        in_zone = Counter(d.zone for d in holding)
        waiting = Counter(d.zone for d in drains if d.waiting_at <= middle < d.cordoned_at)
        by_zone = sum(min(max(0, budget.per_zone - in_zone[zone]), count) for zone, count in waiting.items())
        pieces.append((begin, finish, min(max(0, budget.total - len(holding)), by_zone)))
    return pieces
