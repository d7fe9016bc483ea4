"""Benchmark 1: an instance refresh of the whole group under the budget, against the ideal schedule.

With ``MinHealthyPercentage=0`` every old instance starts terminating at once, so the budget alone decides how
many nodes drain together. Ours: first cordon -> last old instance's terminate action completed. Ideal: the
measured drain durations (cordon -> completion of each node's action) packed into the budget's slots, as a
lower bound and as a greedy schedule with no hand-over latency.
"""

from __future__ import annotations

import bisect
import contextlib
import json
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import load
from benchmarks.harness import sandbox
from benchmarks.records import BudgetWrite, Drain, arrival_order, budget_writes, drains, emptied_at
from benchmarks.report import Result, Row
from benchmarks.schedule import (
    Budget,
    best_packing_found,
    greedy_makespan,
    idle_gaps,
    idle_slot_seconds,
    lower_bound,
)
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING, ActionRecord
from nodecycle_sandbox.checks import (
    completed_before_drained,
    cordon_peaks,
    pdb_breaches,
    released_at,
    unsettled,
)
from nodecycle_sandbox.faults import Fault, Firing
from nodecycle_sandbox.kube import HistoryEntry


def target_for(nodes: int) -> float:
    """The design's, against the lower bound: within 5% at 30 nodes (and fewer), 10% above."""
    return 1.05 if nodes <= 30 else 1.10


# (name, replicas per node, shutdown seconds, PodDisruptionBudget): a web tier, an API, slow workers. The
# shutdown times fall between the drain's polls, as real ones do, rather than on whole seconds.
DEPLOYMENTS: tuple[tuple[str, float, float, dict[str, Any] | None], ...] = (
    ("web", 1.0, 1.5, {"maxUnavailable": 2}),
    ("api", 0.5, 3.5, {"minAvailable": "50%"}),
    ("worker", 0.5, 5.5, None),
)


@dataclass(frozen=True)
class Settings:
    nodes: int
    budget: Budget
    retry_seconds: int  # BudgetRetrySeconds: a waiter's backoff when no release wakes it
    poll_seconds: int  # DrainPollSeconds: how often a drain looks whether its node is empty yet
    drain_concurrency: int = 6
    # Pod shutdowns (and, by the caller, DrainPollSeconds) this many times slower: the same refresh in more
    # wall time, so that the sandbox's CPU per second falls below what two cores give (see order.py).
    pace: float = 1.0
    wake_concurrency: int = 4  # WakeConcurrency: the wake function's containers (budget wake-ups)
    warm: int | None = None  # containers of each function started ahead (None: all; see harness.sandbox)

    @property
    def name(self) -> str:
        """The rows' names: one per setup."""
        paced = f", pods {self.pace:g}x slower" if self.pace != 1 else ""
        return f"refresh {self.nodes} nodes, {self.budget.total}/{self.budget.per_zone}{paced}"


@dataclass(frozen=True)
class StepRun:
    """One invocation of the drain function (or of the wake function, which runs the same code on the wake
    queue), from the runner's journal: when it ran, and its messages."""

    started: float
    finished: float
    wakes: tuple[float, ...]  # when each wake message it carried was sent (SQS SentTimestamp)
    messages: int
    watches: int  # messages that only check whether an older one was lost (see the step engine)


@dataclass(frozen=True)
class RefreshRun:
    settings: Settings
    drains: list[Drain]  # every old node's drain, in cordon order
    writes: list[BudgetWrite]  # the budget ConfigMap's contents, write by write
    cordons: dict[str, float]
    emptied: dict[str, float]  # node -> when its last drainable pod was gone
    refresh_seconds: float  # the instance refresh, as the emulated Auto Scaling timed it
    steps: list[StepRun]  # the drain function's invocations during the refresh
    wake_steps: list[StepRun]  # the wake function's invocations during the refresh (budget wake-ups)
    load: load.Load  # the machine's and the sandbox's CPU during the refresh
    # What the refresh cost in calls, from its start to the last release (storms.py reads them): every
    # function's AWS calls as botocore was asked for them (its retries of a throttled attempt inside one), the
    # API server's requests it served, the faults injected (each a request refused: an attempt more), and the
    # lifecycle actions (terminate and launch) that the refresh started.
    aws_calls: Counter[str] = field(default_factory=Counter)
    kube_requests: Counter[str] = field(default_factory=Counter)
    firings: tuple[Firing, ...] = ()
    lifecycles: int = 0
    left_over: tuple[str, ...] = ()  # what was still not settled once the refresh was over (see leftovers)
    broken: tuple[str, ...] = ()  # the rules it broke (see broken_rules), kept when the caller reports them


def workloads(nodes: int, pace: float = 1.0) -> dict[str, Any]:
    deployments = []
    for name, per_node, shutdown, pdb in DEPLOYMENTS:
        deployment: dict[str, Any] = {
            "name": name,
            "namespace": "shop",
            "replicas": max(1, round(nodes * per_node)),
            "shutdownSeconds": shutdown * pace,
        }
        if pdb is not None:
            deployment["pdb"] = pdb
        deployments.append(deployment)
    return {
        "namespaces": ["shop"],
        "daemonSets": [{"name": "node-agent", "namespace": "kube-system"}],
        "deployments": deployments,
    }


def run(
    settings: Settings, log_dir: Path, faults: Sequence[Fault] = (), seed: int = 0, *, strict: bool = True
) -> RefreshRun:
    """The refresh, measured; ``faults`` are injected from its start to its last release (drawn with ``seed``).
    ``strict``: a refresh that broke the rules raises (it measures nothing); else they are kept in ``broken``."""
    parameters = {
        "BudgetMaxUnavailable": str(settings.budget.total),
        "BudgetMaxUnavailablePerZone": str(settings.budget.per_zone),
        "BudgetRetrySeconds": str(settings.retry_seconds),
        "DrainPollSeconds": str(settings.poll_seconds),
        "DrainConcurrency": str(settings.drain_concurrency),
        "WakeConcurrency": str(settings.wake_concurrency),
    }
    with sandbox(parameters=parameters, size=settings.nodes, log_dir=log_dir, warm=settings.warm) as box:
        server = box.kube
        server.seed(workloads(settings.nodes, settings.pace))
        server.settle(timeout=60)
        old = set(box.asg.in_state("InService"))
        server.reset_history()  # no node is cordoned now: the history starts clean
        server.reset_counters()
        began = time.time()
        if faults:
            box.arm_faults(faults, seed)
        with load.sampled() as sampled:
            refresh = box.asg.start_refresh(min_healthy_percentage=0)
            # Budget-bound: a broken wake-up costs a whole backoff per round of the budget: allow for that,
            # and for a sandbox that slows down with hundreds of nodes on a shared machine.
            rounds = settings.nodes / settings.budget.total + 1
            timeout = 120 + rounds * (settings.retry_seconds + 15) + 3 * settings.nodes
            timeline = box.asg.wait_refresh(refresh, timeout=timeout)
            if timeline.status != "Successful" or timeline.duration is None:
                raise RuntimeError(f"the instance refresh ended {timeline.status}")
            # The last drains' clean-up (slot release) comes just after their completion: wait for an empty
            # budget.
            wait_for(lambda: _budget_empty(server.history()), 60, "the last budget releases")
        firings = tuple(box.fault_firings()) if faults else ()
        box.disarm_faults()
        # Nothing leaked: once the old nodes' objects are gone (2 s after their instances, as on EKS), no action
        # is open, no node is left cordoned or marked by nodecycle, no budget entry is left.
        seen: list[list[str]] = [[]]  # the last look's

        def settled() -> bool:
            seen[0] = leftovers(box, old)
            return not seen[0]

        with contextlib.suppress(TimeoutError):  # what is left then is reported, not raised
            wait_for(settled, 30, "nothing left over", poll=0.5)
        left = seen[0]
        kube_requests = Counter(
            {f"{verb} {resource}": n for (verb, resource), n in server.counters().items()}
        )
        history = server.history()
        actions = [a for a in box.asg.actions(transition=TERMINATING) if a.instance_id in old]
        launches = [a for a in box.asg.actions(transition=LAUNCHING) if a.instance_id not in old]
        aws_calls: Counter[str] = Counter()
        for invocation in box.runner.journal.invocations():
            if invocation.started_at >= began:
                aws_calls.update(invocation.api_calls)
        steps, wake_steps = (
            [
                _step_run(invocation)
                for invocation in box.runner.journal.invocations(function=function)
                if invocation.started_at >= began
            ]
            for function in ("DrainFunction", "WakeFunction")
        )
    found = drains(history, actions)
    if len(found) != len(old):
        raise RuntimeError(f"{len(found)} of {len(old)} old nodes were cordoned and completed")
    broken = broken_rules(history, actions, settings.budget)
    if broken and strict:  # a refresh that beat its ideal by breaking the rules measures nothing
        raise RuntimeError("the refresh broke the rules it is timed under: " + "; ".join(broken))
    writes = budget_writes(history)
    cordons = {drain.node: drain.cordoned_at for drain in found}
    emptied = {drain.node: at for drain in found if (at := emptied_at(history, drain)) is not None}
    return RefreshRun(
        settings,
        found,
        writes,
        cordons,
        emptied,
        timeline.duration,
        steps,
        wake_steps,
        sampled,
        aws_calls,
        kube_requests,
        firings,
        len(actions) + len(launches),
        tuple(left),
        tuple(broken),
    )


# What nodecycle marks a node with while it works on it (the drain's owner and its step in progress)
_MARKS = ("nodecycle.io/owner", "nodecycle.io/in-progress")


def leftovers(box: Any, old: set[str]) -> list[str]:
    """What still says "not done" after the refresh, as the campaign's quiescence reads it: lifecycle actions
    open, nodes of old instances still there, nodes cordoned or annotated by nodecycle, budget entries."""
    left = [f"action {a.instance_id} {a.transition} open" for a in box.asg.actions() if a.active]
    for node in box.kube.objects("nodes"):
        meta = node["metadata"]
        if (node.get("spec") or {}).get("providerID", "").rsplit("/", 1)[-1] in old:
            left.append(f"node {meta['name']} of a replaced instance still there")
        if (node.get("spec") or {}).get("unschedulable"):
            left.append(f"node {meta['name']} left cordoned")
        marks = [mark for mark in _MARKS if mark in (meta.get("annotations") or {})]
        if marks:
            left.append(f"node {meta['name']} still marked {', '.join(marks)}")
    if not _budget_empty(box.kube.history()):
        left.append("budget entries left")
    return left


def broken_rules(history: list[HistoryEntry], actions: list[ActionRecord], budget: Budget) -> list[str]:
    """What the sandbox's own records say was wrong with the refresh: more nodes cordoned at once than the
    budget allows (in all, in a zone), an action completed with pods left on its node or not completed (by a
    call, before its global timeout), a PodDisruptionBudget breached. Empty when the run was fair."""
    peak, zones = cordon_peaks(history, released_at(history, actions))
    broken = [f"{peak} nodes cordoned at once (budget {budget.total})"] if peak > budget.total else []
    broken += [
        f"{count} nodes cordoned at once in zone {zone} (budget {budget.per_zone})"
        for zone, count in zones.items()
        if count > budget.per_zone
    ]
    broken += [f"completed with pods left: {early}" for early in completed_before_drained(history, actions)]
    broken += unsettled(actions)
    broken += [f"PDB {b.budget} at {b.healthy} healthy of {b.desired}" for b in pdb_breaches(history)]
    return broken


def _step_run(invocation: Any) -> StepRun:
    records = (invocation.event or {}).get("Records", [])
    bodies = [json.loads(record["body"]) for record in records]
    wakes = tuple(
        int(record["attributes"]["SentTimestamp"]) / 1000
        for record, body in zip(records, bodies, strict=True)
        if body.get("wake")
    )
    watches = sum(1 for body in bodies if body.get("watch") is not None)
    return StepRun(invocation.started_at, invocation.finished_at, wakes, len(records), watches)


def _budget_empty(history: list[HistoryEntry]) -> bool:
    writes = budget_writes(history)
    return bool(writes) and not writes[-1].holders and not writes[-1].waiters


def result(run: RefreshRun) -> Result:
    settings, found = run.settings, run.drains
    budget = settings.budget
    start = min(drain.cordoned_at for drain in found)
    end = max(drain.done_at for drain in found)
    makespan = end - start
    order = {node: index for index, node in enumerate(arrival_order(run.writes))}
    arrival = sorted(found, key=lambda drain: order.get(drain.node, len(order)))
    bound = lower_bound(found, budget)
    greedy = greedy_makespan(arrival, budget)
    gaps = idle_gaps(found, budget, start, end)
    idle = sum(finish - begin for begin, finish in gaps)
    worst = max((finish - begin for begin, finish in gaps), default=0.0)
    lost = idle_slot_seconds(found, budget, start, end)
    durations = [drain.duration for drain in found]
    name = f"refresh makespan, {settings.nodes} nodes, {budget.total}/{budget.per_zone}"
    short = settings.name
    # The design's target is against the lower bound (the drains packed in the best order, as if they could
    # be split): no order beats it. The greedy schedule in arrival order (first come, first served, with no
    # hand-over delay) is shown beside it, with no target: being close to it says the hand-overs are fast,
    # not that the order is good (see benchmarks/README.md).
    target = target_for(settings.nodes)
    rows = [
        Row(f"{name} vs ideal packing (arrival order)", makespan, greedy, "s", "-"),
        Row(
            f"{name} vs lower bound (any order)",
            makespan,
            bound,
            "s",
            f"<= {target:.2f}",
            makespan <= target * bound,
        ),
        Row(
            f"{short}: usable slot-seconds idle while nodes waited, of all slot-seconds",
            lost,
            budget.total * makespan,
            "s",
            "-",
        ),
        # Not one slot's idle time: the longest stretch with some slot free, merged across slots (see
        # schedule.idle_gaps). One slot's hand-over is the wake benchmark's (release -> next cordon).
        Row(f"{short}: some slot free while a node waits, longest stretch", worst, None, "s", "-"),
    ]
    # The same stretches, less the moments when every drain container was busy: then no step could run
    # whatever nodecycle does (in the sandbox, because each step waits for a share of two loaded cores).
    free = _with_a_free_container(gaps, run.steps, settings.drain_concurrency)
    free_worst = max((finish - begin for begin, finish in free), default=0.0)
    rows.append(Row(f"{short}:   of which with a drain container free", free_worst, None, "s", "-"))
    # How far the sandbox and everything else on the machine filled its cores: near 100%, every hand-over
    # waits for a share of CPU, and the rows above measure the machine as much as nodecycle.
    busy = run.load.machine_busy(start, end)
    if busy is not None:
        rows.append(Row(f"{short}: machine CPU busy over the makespan", 100 * busy, None, "%", "-"))
    # Inside each measured duration, so invisible to the ratios above: the time from the node's last pod
    # leaving to the action's completion, mostly the wait for the drain's next poll.
    tails = [drain.done_at - run.emptied[drain.node] for drain in found if drain.node in run.emptied]
    if tails:
        tail = statistics.median(tails)
        rows.append(
            Row(f"{short}: drain tail: last pod gone -> action completed, median", tail, 0.0, "s", "-")
        )
    first_wait = min(drain.waiting_at for drain in found)
    shutdowns = ", ".join(f"{kind} {shutdown * settings.pace:g} s" for kind, _, shutdown, _ in DEPLOYMENTS)
    details = [
        f"group of {settings.nodes} nodes over 3 zones; budget {budget.total} in all, {budget.per_zone} per zone; "
        f"BudgetRetrySeconds {settings.retry_seconds}; DrainPollSeconds {settings.poll_seconds}; "
        f"DrainConcurrency {settings.drain_concurrency}",
        f"workloads: {_workload_summary(settings.nodes)}; pod shutdown: {shutdowns}; a DaemonSet pod per node",
        f"drain durations (cordon -> action completed): min {min(durations):.2f} s, "
        f"median {statistics.median(durations):.2f} s, max {max(durations):.2f} s, sum {sum(durations):.1f} s",
        f"makespan {makespan:.2f} s (first cordon -> last completion); lower bound {bound:.2f} s; "
        f"greedy schedule in arrival order {greedy:.2f} s; whole refresh {run.refresh_seconds:.1f} s",
        f"the same greedy, zone-balanced (the zone with the most drains left first): "
        f"{greedy_makespan(arrival, budget, balance_zones=True):.2f} s; best packing found knowing every "
        f"duration in advance: {best_packing_found(found, budget):.2f} s (the optimum lies between it and the "
        f"lower bound)",
        f"start-up (first terminate action -> first cordon, outside the makespan): {start - first_wait:.2f} s",
        f"idle stretches while a node waited: {len(gaps)}, total {idle:.2f} s, worst {worst:.2f} s",
    ]
    if tails:
        details.append(
            f"drain tail (last pod gone -> action completed): median {statistics.median(tails):.2f} s, "
            f"max {max(tails):.2f} s, sum {sum(tails):.1f} s of the {sum(durations):.1f} s of drains"
        )
    details += _where_the_idle_time_went(run, gaps, free, start, end)
    return Result("instance refresh vs the ideal schedule", rows, details)


def _busy(steps: list[StepRun], moment: float) -> int:
    return sum(1 for step in steps if step.started <= moment < step.finished)


def _with_a_free_container(
    gaps: list[tuple[float, float]], steps: list[StepRun], concurrency: int, resolution: float = 0.05
) -> list[tuple[float, float]]:
    """The parts of ``gaps`` during which fewer than ``concurrency`` drain invocations were running."""
    found: list[tuple[float, float]] = []
    for begin, finish in gaps:
        moment = begin
        while moment < finish:
            upto = min(finish, moment + resolution)
            if _busy(steps, (moment + upto) / 2) < concurrency:
                if found and abs(found[-1][1] - moment) < 1e-9:
                    found[-1] = (found[-1][0], upto)
                else:
                    found.append((moment, upto))
            moment = upto
    return found


def _not_yet_in_the_budget(
    gaps: list[tuple[float, float]],
    drains: list[Drain],
    budget: Budget,
    writes: list[BudgetWrite],
    resolution: float = 0.05,
) -> float:
    """How much of ``gaps`` passed while none of the nodes that could have taken the free slot (waiting, room
    in their zone) was in the budget document yet, as a waiter or a holder not yet cordoned: they had not
    asked for a slot (intake, their first step). The rest of the idle time is the hand-over."""
    times = [write.time for write in writes]
    seconds = 0.0
    for begin, finish in gaps:
        moment = begin
        while moment < finish:
            upto = min(finish, moment + resolution)
            middle = (moment + upto) / 2
            holding = Counter(d.zone for d in drains if d.cordoned_at <= middle < d.done_at)
            could = {
                d.node
                for d in drains
                if d.waiting_at <= middle < d.cordoned_at and holding[d.zone] < budget.per_zone
            }
            index = bisect.bisect_right(times, middle) - 1
            asked = set() if index < 0 else {e.node for e in (*writes[index].waiters, *writes[index].holders)}
            if not could & asked:
                seconds += upto - moment
            moment = upto
    return seconds


def _where_the_idle_time_went(
    run: RefreshRun,
    gaps: list[tuple[float, float]],
    free: list[tuple[float, float]],
    start: float,
    end: float,
) -> list[str]:
    """What the sandbox and the drain function were doing while slots stood idle."""
    concurrency = run.settings.drain_concurrency
    idle = sum(finish - begin for begin, finish in gaps)
    idle_free = sum(finish - begin for begin, finish in free)
    in_window = [step for step in run.steps if step.finished > start and step.started < end]
    busy = sum(min(end, step.finished) - max(start, step.started) for step in in_window)
    per_message = [(step.finished - step.started) / step.messages for step in in_window if step.messages]
    # Wake-ups go to the wake function's queue; any a drain invocation carried is counted too.
    woken = [step for step in run.wake_steps if step.finished > start and step.started < end]
    wake_delays = [step.started - sent for step in (*in_window, *woken) for sent in step.wakes]
    lines = [
        f"drain function: {len(in_window)} invocations, its {concurrency} containers "
        f"{100 * busy / (concurrency * (end - start)):.0f}% busy over the makespan; per message "
        + (
            f"median {statistics.median(per_message):.2f} s, max {max(per_message):.2f} s"
            if per_message
            else "-"
        ),
        f"idle slots while a node waited: {idle:.1f} s, of which {idle - idle_free:.1f} s with every drain "
        f"container busy and {idle_free:.1f} s with one free",
    ]
    messages = sum(step.messages for step in in_window)
    watches = sum(step.watches for step in in_window)
    lines.append(
        f"drain messages: {messages}, of which {watches} watches (checks that an older message was not lost); "
        f"wake-ups: {len(wake_delays)}, in {len(woken)} wake function invocations "
        f"({run.settings.wake_concurrency} containers)"
    )
    if wake_delays:
        lines.append(
            f"wake messages waited in their queue: median {statistics.median(wake_delays):.2f} s, "
            f"max {max(wake_delays):.2f} s"
        )
    upstream = _not_yet_in_the_budget(gaps, run.drains, run.settings.budget, run.writes)
    lines.append(
        f"idle slots while a node waited: {upstream:.1f} s while no waiting node that could take the slot "
        f"had entered the budget yet (intake, its first step), {idle - upstream:.1f} s while one had (the "
        f"hand-over: release, wake-up, its step)"
    )
    idle_load = [run.load.machine_busy(begin, finish) for begin, finish in gaps if finish - begin >= 0.5]
    loaded = [share for share in idle_load if share is not None]
    if loaded:
        lines.append(
            f"machine CPU during the idle stretches of 0.5 s or more: {100 * statistics.median(loaded):.0f}% "
            f"busy (median), {100 * min(loaded):.0f}% at least"
        )
    return lines + run.load.summary(start, end)


def _workload_summary(nodes: int) -> str:
    parts = []
    for deployment in workloads(nodes)["deployments"]:
        pdb = deployment.get("pdb")
        guard = f" under a PDB {next(iter(pdb))}={next(iter(pdb.values()))}" if pdb else ""
        parts.append(f"{deployment['name']} x{deployment['replicas']}{guard}")
    return ", ".join(parts)
