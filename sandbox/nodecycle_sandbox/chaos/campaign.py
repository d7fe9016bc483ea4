"""A campaign: K seeded scenarios on one world, each judged by the invariants; every violation shrunk to the
fewest faults that still reproduce it, and printed with its seed and trace."""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodecycle_sandbox.chaos import invariants
from nodecycle_sandbox.chaos.invariants import Violation
from nodecycle_sandbox.chaos.plan import KINDS, Scenario, draw
from nodecycle_sandbox.chaos.world import CLUSTER_KINDS, Observation, World
from nodecycle_sandbox.faults import KINDS as FAULT_KINDS


@dataclass
class Finding:
    """A scenario that broke an invariant, with what it takes to see it again."""

    scenario: Scenario
    violations: list[Violation]
    fired: list[str]  # the fault ids that fired in the failing run
    minimal: Scenario | None = None  # the scenario with the fewest faults that still broke the same invariant
    reruns: int = 0
    reproduced: bool | None = None  # None: not shrunk

    def trace(self) -> str:
        shown = self.minimal or self.scenario
        lines = [f"  seed {self.scenario.seed} scenario {self.scenario.index}: {shown.describe()}"]
        for violation in self.violations:
            lines.append(f"    VIOLATION {violation.invariant}: {violation.detail}")
        if self.minimal is not None:
            kept = ", ".join(f.describe() for f in self.minimal.faults) or "none: the scenario alone"
            again = "reproduced" if self.reproduced else "NOT reproduced on rerun (an interleaving)"
            lines.append(f"    minimal faults ({again}, {self.reruns} reruns): {kept}")
        else:
            lines.append(f"    faults: {', '.join(f.describe() for f in self.scenario.faults) or 'none'}")
        lines.append(f"    fired: {', '.join(self.fired) or 'none'}")
        lag = " --lag" if self.scenario.lagging else ""
        lag += " --forge" if self.scenario.forgeries else ""
        lines.append(
            f"    replay: nodecycle chaos --seed {self.scenario.seed} --only {self.scenario.index}{lag}"
        )
        return "\n".join(lines)


@dataclass
class CampaignReport:
    seed: int
    scenarios: int = 0
    seconds: float = 0.0
    startup_seconds: float = 0.0
    scenario_seconds: list[float] = field(default_factory=list)
    by_kind: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    ec2_lagged: int = 0  # the functions' EC2 reads and calls that met the lag (a stale answer or a NotFound)
    violations: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # scenarios that could not be set up or run
    # The drawn outages never set ("<scenario>: <id> <kind>: <why>"): what the faults' counts do not cover
    unset: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings and not self.errors

    def summary(self) -> str:
        per = sum(self.scenario_seconds) / len(self.scenario_seconds) if self.scenario_seconds else 0.0
        lines = [
            f"campaign seed {self.seed}: {self.scenarios} scenarios in {self.seconds:.0f}s "
            f"({per:.1f}s per scenario in its world, {self.startup_seconds:.0f}s to start the world)",
            "  scenarios by kind: " + ", ".join(f"{k} {self.by_kind[k]}" for k in KINDS if self.by_kind[k]),
            f"  faults injected: {sum(self.faults[kind] for kind in FAULT_KINDS)}",
        ]
        lines += [f"    {kind:<20} {self.faults[kind]}" for kind in FAULT_KINDS if self.faults[kind]]
        # (what the harsher cluster did by itself: a hung runtime's node NotReady, an operator's taint)
        lines += [
            f"    {kind:<20} {self.faults[kind]} (the cluster's)"
            for kind in CLUSTER_KINDS
            if self.faults[kind]
        ]
        if self.unset:  # (drawn, never set: the counts above do not cover them)
            lines.append(f"  outages drawn but never set: {len(self.unset)}")
            lines += [f"    {what}" for what in self.unset]
        if self.ec2_lagged:
            lines.append(f"  EC2 reads and calls that met its lag: {self.ec2_lagged}")
        lines.append(f"  violations: {sum(self.violations.values())}")
        for name, what in invariants.INVARIANTS.items():
            lines.append(f"    {name:<15} {self.violations[name]:>4}  {what}")
        if self.errors:
            lines.append(f"  scenarios that could not run: {len(self.errors)}")
            lines += [f"    {error}" for error in self.errors]
        for finding in self.findings:
            lines.append(finding.trace())
        return "\n".join(lines)


def run_campaign(
    *,
    scenarios: int,
    seed: int,
    root: Path,
    layer_dir: Path | None = None,
    only: int | None = None,
    kinds: tuple[str, ...] = KINDS,
    faults: bool = True,
    lag: bool = False,
    forge: bool = False,
    shrink: bool = True,
    stop_at_first: bool = False,
    log_dir: Path | None = None,
    warm_up: bool = True,
    worlds: int = 1,
    progress: Callable[[str], None] = lambda _: None,
) -> CampaignReport:
    """Scenarios 0..K-1 of ``seed`` (or ``only`` that one). ``worlds`` > 1 shares them out, index by index,
    among that many worlds in their own processes: a scenario spends most of its time waiting for steps and
    timeouts, so several worlds at once use the cores a single one leaves idle. Each scenario is the same
    whichever world runs it; the report is the sum of theirs. ``lag``: each scenario on an eventually
    consistent AWS (plan.draw_lag), the same stories and faults otherwise; ``forge``: forged and replayed
    messages sent to the intake queues among the real ones (plan.draw_forgeries)."""
    indexes = [only] if only is not None else list(range(scenarios))
    options: dict[str, Any] = {
        "seed": seed,
        "root": root,
        "layer_dir": layer_dir,
        "kinds": kinds,
        "faults": faults,
        "lag": lag,
        "forge": forge,
        "shrink": shrink,
        "stop_at_first": stop_at_first,
        "warm_up": warm_up,
    }
    if worlds <= 1 or len(indexes) <= 1:
        return _run(indexes, log_dir=log_dir, progress=progress, **options)
    return _run_in_worlds(indexes, worlds, log_dir=log_dir, progress=progress, **options)


def _run(
    indexes: list[int],
    *,
    seed: int,
    root: Path,
    layer_dir: Path | None,
    kinds: tuple[str, ...],
    faults: bool,
    lag: bool,
    forge: bool,
    shrink: bool,
    stop_at_first: bool,
    log_dir: Path | None,
    warm_up: bool,
    progress: Callable[[str], None],
) -> CampaignReport:
    report = CampaignReport(seed=seed)
    began = time.monotonic()
    with World(root=root, layer_dir=layer_dir, log_dir=log_dir, warm_up=warm_up) as world:
        report.startup_seconds = time.monotonic() - began
        for index in indexes:
            scenario = draw(seed, index, kinds=kinds, faults=faults, lag=lag, forge=forge)
            try:
                observation = world.run(scenario)
            except Exception as error:  # a scenario that could not be set up or run is reported, not fatal
                report.errors.append(f"{scenario.name}: {type(error).__name__}: {error}")
                progress(f"{scenario.name:<10} {scenario.kind:<10} could not run: {error}")
                continue
            found = invariants.check(observation)
            report.scenarios += 1
            report.scenario_seconds.append(observation.seconds)
            report.by_kind[scenario.kind] += 1
            report.faults.update(f.kind for f in observation.firings)
            report.ec2_lagged += len(observation.ec2_lagged)
            report.unset += [f"{scenario.name}: {what}" for what in observation.unset]
            progress(_line(observation, found))
            if not found:
                continue
            report.violations.update(v.invariant for v in found)
            finding = Finding(scenario, found, sorted({f.fault for f in observation.firings}))
            if shrink:
                _shrink(world, finding, observation, progress)
            report.findings.append(finding)
            if stop_at_first:
                break
    report.seconds = time.monotonic() - began
    return report


def _run_in_worlds(
    indexes: list[int],
    worlds: int,
    *,
    log_dir: Path | None,
    progress: Callable[[str], None],
    **options: Any,
) -> CampaignReport:
    """Each world in a process of its own (spawned: no thread or socket of this one is inherited), its
    progress lines passed back through a queue as they come."""
    began = time.monotonic()
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager, ProcessPoolExecutor(worlds, mp_context=context) as pool:
        lines = manager.Queue()
        futures = [
            pool.submit(
                _run_share,
                indexes[n::worlds],
                lines,
                log_dir=None if log_dir is None else log_dir / f"world-{n}",
                **options,
            )
            for n in range(worlds)
        ]
        while not all(f.done() for f in futures):
            with contextlib.suppress(queue.Empty):
                progress(lines.get(timeout=0.5))
        while not lines.empty():
            progress(lines.get())
        shares = [f.result() for f in futures]
    report = CampaignReport(seed=options["seed"])
    for share in shares:
        report.scenarios += share.scenarios
        report.scenario_seconds += share.scenario_seconds
        report.by_kind.update(share.by_kind)
        report.faults.update(share.faults)
        report.ec2_lagged += share.ec2_lagged
        report.violations.update(share.violations)
        report.findings += share.findings
        report.errors += share.errors
        report.unset += share.unset
        report.startup_seconds = max(report.startup_seconds, share.startup_seconds)
    report.findings.sort(key=lambda f: f.scenario.index)
    report.seconds = time.monotonic() - began
    return report


def _run_share(indexes: list[int], lines: Any, **options: Any) -> CampaignReport:
    """One world's share of a campaign, in its own process."""
    return _run(indexes, progress=lines.put, **options)


def _line(observation: Observation, found: list[Violation]) -> str:
    scenario = observation.scenario
    fired = Counter(f.kind for f in observation.firings)
    faults = ", ".join(f"{k} {n}" for k, n in sorted(fired.items())) or "no fault fired"
    if observation.ec2_lagged:  # which of the functions' EC2 calls met the lag, and how often
        met = Counter(what.split()[0] for what in observation.ec2_lagged)
        faults += "; EC2 lag met " + ", ".join(f"{k} {n}" for k, n in sorted(met.items()))
    verdict = "ok" if not found else "VIOLATED " + ", ".join(sorted({v.invariant for v in found}))
    phases = " ".join(f"{name} {seconds:g}" for name, seconds in observation.phases)
    # each violation's detail at once, so a long run stopped early still tells what it found
    notes = "".join(f"\n           {v.invariant}: {v.detail}" for v in found)
    notes += "".join(
        f"\n           note: {note}" for note in observation.notes
    )  # what the judges may have missed
    notes += "".join(f"\n           forged: {sent}" for sent in observation.forged)
    return (
        f"{scenario.name:<10} {scenario.kind:<10} {observation.seconds:5.1f}s  {verdict}  ({faults})  [{phases}]"
        f"{notes}"
    )


def _shrink(
    world: World, finding: Finding, observation: Observation, progress: Callable[[str], None]
) -> None:
    """The fewest faults that still break the same invariant: first only the faults that fired, then
    without each of those in turn while it still fails. A rerun is a new interleaving, so a violation that
    does not come back at all is said so, not hidden."""
    wanted = {v.invariant for v in finding.violations}

    def fails(candidate: Scenario) -> bool:
        finding.reruns += 1
        try:
            again = world.run(candidate)
        except Exception as error:  # a rerun that could not run tells nothing either way
            progress(f"    shrinking {candidate.name}: could not run: {error}")
            return False
        broken = {v.invariant for v in invariants.check(again)}
        progress(
            f"    shrinking {candidate.name}: {len(candidate.faults)} faults -> {'fails' if broken & wanted else 'passes'}"
        )
        return bool(broken & wanted)

    fired = {f.fault for f in observation.firings}
    current = finding.scenario.with_faults(tuple(f for f in finding.scenario.faults if f.id in fired))
    if not fails(current):
        if not fails(finding.scenario):
            finding.minimal, finding.reproduced = finding.scenario, False
            return
        current = finding.scenario
    for fault in list(current.faults):
        smaller = current.without(fault.id)
        if fails(smaller):
            current = smaller
    if current.ec2_lag and fails(current.without_ec2_lag()):  # (EC2's lag is the scenario's, not a fault's)
        current = current.without_ec2_lag()
    finding.minimal, finding.reproduced = current, True
