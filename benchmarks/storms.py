"""Benchmark: the same instance refresh twice, side by side: on a quiet sandbox, and in a storm of the faults a
real account and a real cluster answer with while hundreds of nodes churn.

The storm (``STORM``, seeded): Auto Scaling and EC2 calls throttled (``Throttling``, ``RequestLimitExceeded``),
some DynamoDB calls throttled too, budget ConfigMap writes answered 409 Conflict as if another writer had got
there first, evictions answered 429 with ``Retry-After`` (API Priority and Fairness). Each refresh is the refresh
benchmark's (``refresh.py``: a group under PDBs, every old instance terminating at once, the budget alone
deciding how many drain together) and is judged by the same records:

- the makespan (first cordon -> last completion) against the lower bound of its own drains, and the storm's
  against the quiet one's: what the storm cost in all;
- AWS calls per lifecycle (terminate and launch), as the functions asked botocore for them (a throttled attempt
  botocore retries is inside one call) and the attempts the storm refused; heartbeats apart;
- Kubernetes requests per drained node: those the API server served and those the storm answered instead;
- a freed slot's worst idle time (its holder's drain over -> the next node's cordon, as ``wake.py``);
- the rules (budget in all and per zone, no action completed with pods left or not completed by nodecycle,
  no PDB breached: ``refresh.broken_rules``, the sandbox's checks) and nothing left over (``refresh.leftovers``).

A storm costs something: each throttled call waits out botocore's backoff, each 409 a read and another write,
each 429 its Retry-After. The question is whether it costs more than that: a slot held while a call backs off
for long, retries multiplying calls, a heartbeat storm, a waiter woken late because its wake-up was refused.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from benchmarks import refresh, wake
from benchmarks.report import Result, Row
from benchmarks.schedule import lower_bound
from nodecycle_sandbox.faults import Fault

SEED = 48
STORM: tuple[Fault, ...] = (
    Fault("asg-throttled", "aws-throttle", "autoscaling.*", probability=0.25),
    Fault("ec2-throttled", "aws-throttle", "ec2.*", probability=0.25),
    Fault("dynamodb-throttled", "aws-throttle", "dynamodb.*", probability=0.1),
    # a 409 is drawn only for a write that carries a resourceVersion: the budget's read-modify-write
    Fault("budget-conflict", "kube-conflict", "* configmaps", probability=0.3),
    Fault("eviction-throttled", "kube-throttle", "POST pods/eviction", probability=0.2, value=2),
)
HEARTBEAT = "autoscaling.RecordLifecycleActionHeartbeat"


@dataclass(frozen=True)
class Figures:
    """One refresh's figures."""

    makespan: float
    bound: float
    aws_calls: float  # per lifecycle, as asked of botocore
    aws_refused: float  # per lifecycle: attempts the storm refused
    heartbeats: float  # per terminate lifecycle
    kube_requests: float  # per drained node, served and refused
    kube_refused: float  # per drained node
    worst_idle: float  # a freed slot's, drain over -> next cordon
    entry: (
        float  # the latest a node entered the budget after its terminate action started (intake, first step)
    )
    broken: tuple[str, ...]  # rules broken and things left over


def figures(run: refresh.RefreshRun) -> Figures:
    found = run.drains
    makespan = max(d.done_at for d in found) - min(d.cordoned_at for d in found)
    fired = Counter(firing.kind for firing in run.firings)
    aws_refused = sum(n for kind, n in fired.items() if kind.startswith(("aws-", "dynamodb-")))
    kube_refused = sum(n for kind, n in fired.items() if kind.startswith("kube-"))
    completions = {drain.node: drain.done_at for drain in found}
    handovers = wake.handovers(run.writes, run.cordons, completions)
    lifecycles = max(1, run.lifecycles)
    entered: dict[str, float] = {}
    for write in run.writes:
        for entry in (*write.holders, *write.waiters):
            entered.setdefault(entry.node, write.time)
    late = [entered[d.node] - d.waiting_at for d in found if d.node in entered]
    return Figures(
        makespan=makespan,
        bound=lower_bound(found, run.settings.budget),
        aws_calls=sum(run.aws_calls.values()) / lifecycles,
        aws_refused=aws_refused / lifecycles,
        heartbeats=run.aws_calls[HEARTBEAT] / len(found),
        kube_requests=(sum(run.kube_requests.values()) + kube_refused) / len(found),
        kube_refused=kube_refused / len(found),
        worst_idle=max((h.idle for h in handovers), default=0.0),
        entry=max(late, default=0.0),
        broken=(*run.broken, *run.left_over),
    )


def run(
    settings: refresh.Settings, log_dir: Path, quiet: refresh.RefreshRun | None = None
) -> tuple[refresh.RefreshRun, refresh.RefreshRun]:
    """The quiet refresh, then the stormy one, on fresh sandboxes of the same settings. Neither raises for a
    broken rule: the rows say whether every rule held. ``quiet``: a quiet refresh of these settings already run
    (the refresh benchmark's, which raises for a broken rule: one that returned broke none), reused rather than
    run again: the same refresh on the same code, a sandbox of its own as the storm's is."""
    if quiet is not None and quiet.settings != settings:
        raise ValueError(f"the quiet refresh given ran with {quiet.settings}, not {settings}")
    if quiet is None:
        quiet = refresh.run(settings, log_dir / "quiet", strict=False)
    stormy = refresh.run(settings, log_dir / "storm", STORM, SEED, strict=False)
    return quiet, stormy


def result(quiet_run: refresh.RefreshRun, storm_run: refresh.RefreshRun) -> Result:
    settings = quiet_run.settings
    quiet, storm = figures(quiet_run), figures(storm_run)
    name = f"storm {settings.nodes} nodes, {settings.budget.total}/{settings.budget.per_zone}"
    rows = [
        # (the design's target on it is the refresh benchmark's: here it is the yardstick of the storm's)
        Row(f"{name}: quiet makespan vs lower bound", quiet.makespan, quiet.bound, "s", "-"),
        Row(f"{name}: storm makespan vs lower bound", storm.makespan, storm.bound, "s", "-"),
        Row(f"{name}: storm makespan vs quiet", storm.makespan, quiet.makespan, "s", "-"),
        Row(f"{name}: AWS calls per lifecycle, storm vs quiet", storm.aws_calls, quiet.aws_calls, "", "-"),
        Row(f"{name}:   AWS attempts refused per lifecycle, storm", storm.aws_refused, None, "", "-"),
        Row(
            f"{name}: heartbeats per drained node, storm vs quiet",
            storm.heartbeats,
            quiet.heartbeats,
            "",
            "-",
        ),
        Row(
            f"{name}: K8s requests per drained node, storm vs quiet",
            storm.kube_requests,
            quiet.kube_requests,
            "",
            "-",
        ),
        Row(f"{name}:   K8s requests refused per drained node, storm", storm.kube_refused, None, "", "-"),
        Row(
            f"{name}: a freed slot idle, max, storm vs quiet (drain over -> next cordon)",
            storm.worst_idle,
            quiet.worst_idle,
            "s",
            "-",
        ),
        # A node not in the budget yet cannot take a slot freed meanwhile: its intake and first step were late
        Row(
            f"{name}: terminate action started -> node in the budget, max, storm vs quiet",
            storm.entry,
            quiet.entry,
            "s",
            "-",
        ),
        Row(
            f"{name}: rules broken or left over, quiet + storm",
            len(quiet.broken) + len(storm.broken),
            None,
            "",
            "0",
            not quiet.broken and not storm.broken,
        ),
    ]
    fired = Counter(f"{firing.kind}[{firing.fault}]" for firing in storm_run.firings)
    details = [
        f"group of {settings.nodes} nodes over 3 zones; budget {settings.budget.total} in all, "
        f"{settings.budget.per_zone} per zone; BudgetRetrySeconds {settings.retry_seconds}; DrainPollSeconds "
        f"{settings.poll_seconds}; DrainConcurrency {settings.drain_concurrency}",
        "storm (seed " + str(SEED) + "): " + "; ".join(fault.describe() for fault in STORM),
        "injected: " + (", ".join(f"{kind} {n}" for kind, n in sorted(fired.items())) or "nothing"),
    ]
    for label, ran, found in (("quiet", quiet_run, quiet), ("storm", storm_run, storm)):
        durations = [drain.duration for drain in ran.drains]
        details += [
            f"{label}: makespan {found.makespan:.2f} s, lower bound {found.bound:.2f} s; drains (cordon -> "
            f"completed) median {statistics.median(durations):.2f} s, max {max(durations):.2f} s, sum "
            f"{sum(durations):.1f} s; {ran.lifecycles} lifecycles",
            f"{label}: AWS calls " + _inline(ran.aws_calls),
            f"{label}: K8s requests served " + _inline(ran.kube_requests),
            f"{label}: rules broken or left over: " + ("; ".join(found.broken) or "none"),
        ]
    return Result("instance refresh, quiet and in a storm of throttles and conflicts", rows, details)


def _inline(counts: Counter[str]) -> str:
    return ", ".join(f"{call} {n}" for call, n in counts.most_common()) or "none"
