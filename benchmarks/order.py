"""Benchmark: the order in which the budget hands out slots, at 30, 100 and 300 nodes.

The same instance refresh as ``refresh.py`` (every old instance terminating at once, pods under
PodDisruptionBudgets, the budget alone deciding how many drain together), at three group sizes, with a
budget that grows with the group (an eighth of it in all, a twenty-fourth per zone, at least 4 and 2), and
the template's DrainConcurrency (20).

- makespan against the lower bound (no order can beat it): first come, first served can leave the last
  drains bunched in one zone, which only its own share of the slots can drain; an order that prefers the
  zone with the most work left closes part of that gap. Targets: within 5% at 30 nodes, 10% above;
- the worst wait of any node for its slot, against the same drains packed first come, first served
  (each node's measured drain, in arrival order, started the moment the budget's rules allow, with no
  hand-over delay; computed from the same run): what a different order costs the node it passes over.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from benchmarks import refresh, wake
from benchmarks.records import arrival_order
from benchmarks.report import Result, Row
from benchmarks.schedule import Budget, greedy_starts, lower_bound

DRAIN_CONCURRENCY = 20  # the template's default


def budget_for(nodes: int) -> Budget:
    return Budget(total=max(4, nodes // 8), per_zone=max(2, nodes // 24))


@dataclass(frozen=True)
class Ordered:
    name: str  # the setup, as its rows begin
    nodes: int
    budget: Budget
    makespan: float
    bound: float
    worst_wait: float  # seconds from the first cordon to the last node's cordon
    fcfs_worst_wait: float  # the same in the first-come-first-served packing of the same drains
    gap_rows: list[Row]  # the refresh's idle slots and one slot's hand-over
    details: list[str]


def run_one(
    nodes: int,
    retry_seconds: int,
    poll_seconds: int,
    log_dir: Path,
    pace: float = 1.0,
    warm: int | None = None,
) -> Ordered:
    """One refresh of ``nodes``; ``pace``: pod shutdowns and the drain's polls that many times slower; ``warm``:
    see harness.sandbox."""
    budget = budget_for(nodes)
    poll = max(1, round(poll_seconds * pace))
    settings = refresh.Settings(nodes, budget, retry_seconds, poll, DRAIN_CONCURRENCY, pace, warm=warm)
    suffix = f"-pace{pace:g}" if pace != 1 else ""
    return _ordered(refresh.run(settings, log_dir / f"order-{nodes}{suffix}"))


def _ordered(done: refresh.RefreshRun) -> Ordered:
    budget = done.settings.budget
    start = min(drain.cordoned_at for drain in done.drains)
    end = max(drain.done_at for drain in done.drains)
    order = {node: index for index, node in enumerate(arrival_order(done.writes))}
    arrival = sorted(done.drains, key=lambda drain: order.get(drain.node, len(order)))
    fcfs = greedy_starts(arrival, budget)
    summary = refresh.result(done)
    handed = wake.result(done)  # one slot's hand-over, where the stretches above merge all slots
    return Ordered(
        name=done.settings.name,
        nodes=done.settings.nodes,
        budget=budget,
        makespan=end - start,
        bound=lower_bound(done.drains, budget),
        worst_wait=max(drain.cordoned_at - start for drain in done.drains),
        fcfs_worst_wait=max(fcfs.values()),
        gap_rows=[row for row in summary.rows if not row.name.startswith("refresh makespan")] + handed.rows,
        details=[f"{done.settings.name}: {line}" for line in summary.details + handed.details],
    )


def result(found: list[Ordered]) -> Result:
    rows = []
    details = []
    for ordered in found:
        name = ordered.name
        target = refresh.target_for(ordered.nodes)
        rows.append(
            Row(
                f"{name}: makespan vs lower bound",
                ordered.makespan,
                ordered.bound,
                "s",
                f"<= {target:.2f}",
                ordered.makespan <= target * ordered.bound,
            )
        )
        rows.append(
            Row(
                f"{name}: worst wait for a slot vs FCFS packing",
                ordered.worst_wait,
                ordered.fcfs_worst_wait,
                "s",
                "-",
            )
        )
        rows += ordered.gap_rows
        details += ordered.details
    return Result("refresh order at size: makespan vs lower bound, worst wait vs FCFS", rows, details)
