"""The mutation check: copies of the product with one deliberate bug each, run through the campaign, which
must catch every one. The real source is never touched: ``layers/`` is copied to a temporary directory, a
small textual patch is applied to the copy, and the handlers run that copy (``SandboxOptions.layer_dir``).

A patch that no longer applies (the product's text moved on) is an error that names the file and the text,
never a silently unmutated run.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from nodecycle_sandbox.chaos.campaign import run_campaign
from nodecycle_sandbox.chaos.plan import KINDS


@dataclass(frozen=True)
class Mutation:
    name: str
    what: str
    file: str  # under layers/
    old: str
    new: str
    kinds: tuple[str, ...] = KINDS  # the scenarios that can show it (all, unless it needs two owners)
    forge: bool = False  # shown only by forged or replayed messages (the campaign's --forge)


MUTATIONS = (
    Mutation(
        "budget-check-removed",
        "the budget admits every node: no limit, global or per zone",
        "nodecycle/domain/budget/rules.py",
        "        if node in self._nodes:\n            return True\n        if len(self._nodes) >= limits.total:",
        "        if True:  # MUTATION: the budget check removed\n            return True\n        if len(self._nodes) >= limits.total:",
    ),
    Mutation(
        "complete-before-drained",
        "the drain goes on to completion as soon as it starts, pods or not",
        "nodecycle/domain/drain/evict.py",
        # (the line alone: the stuck-pod check above it changes its arguments often)
        "        if len(stuck) == len(left):\n",
        "        if True:  # MUTATION: completion before the drain ends\n",
    ),
    Mutation(
        "delete-not-evict",
        "the drain deletes its pods instead of evicting them: no PodDisruptionBudget is asked",
        "nodecycle/domain/drain/evict.py",
        "                result = self._cluster.evict(pod, grace)\n",
        "                self._cluster.delete_pod(pod, grace)  # MUTATION: deleted, not evicted\n"
        "                result = EvictionResult(Eviction.EVICTED)\n",
    ),
    Mutation(
        "force-before-timeout",
        "the force policy deletes the pods at the drain's second poll, its timeout over or not",
        "nodecycle/domain/drain/evict.py",
        "        if now >= deadline and polls > 0:  # every drain asks its pods to leave once, before any force\n",
        "        if polls > 0:  # MUTATION: forced before the drain timeout\n",
    ),
    Mutation(
        "sweeper-stale-always",
        "the sweeper judges every budget entry of its owner stale",
        "nodecycle/domain/sweep/budget_entries.py",
        "        def stale(entries: Sequence[Holder | Waiter]) -> Verdict:\n",
        "        def stale(entries: Sequence[Holder | Waiter]) -> Verdict:\n"
        "            return Verdict(stale=frozenset(e.record_id for e in entries))  # MUTATION: stale check always true\n",
    ),
    Mutation(
        "ownership-skipped",
        "the sweeper takes every annotated node for its own",
        "nodecycle/domain/sweep/nodes.py",
        "return [node for node in self._nodes() if node.owner == owner]",
        "return [node for node in self._nodes() if node.owner is not None]  # MUTATION: ownership skipped",
        kinds=("two-owners",),
    ),
    Mutation(
        "sweeper-frees-live-addresses",
        "the sweeper takes every associated address for a gone instance's: it disassociates those of live ones",
        "nodecycle/domain/sweep/addresses.py",
        "                _on_gone_instance(address, states) or self._left_on_an_interface(address, states, left, now)\n",
        "                True  # MUTATION: every associated address taken for a gone instance's\n",
    ),
    Mutation(
        "sweeper-keep-alive-skipped",
        "the sweeper never heartbeats an open action: a stalled work queue lets Auto Scaling end it undrained",
        "nodecycle/domain/sweep/lifecycles.py",
        "        if not self._heartbeat_due(record, now, late):\n            return record\n",
        "        if True:  # MUTATION: the sweeper's keep-alive heartbeat skipped\n            return record\n",
    ),
    Mutation(
        "drain-timeout-tripled",
        "the drain waits three times its DrainTimeoutSeconds before its timeout policy applies: its slot held as long",
        "nodecycle/wiring/common.py",
        "        timeout=timedelta(seconds=settings.drain_timeout_seconds),\n",
        "        timeout=timedelta(seconds=3 * settings.drain_timeout_seconds),  # MUTATION: drain timeout tripled\n",
    ),
    Mutation(
        "confirm-skipped",
        "the engine takes every action it is told of for active: Auto Scaling is not asked",
        "nodecycle/adapters/aws/autoscaling.py",
        "        if self._held_in_its_group(action):\n            return self.heartbeat(action)\n        return False\n",
        "        return True  # MUTATION: every action confirmed, forged or not\n",
        forge=True,
    ),
)


class PatchDoesNotApply(RuntimeError):
    pass


@contextmanager
def mutated_layer(root: Path, mutation: Mutation) -> Iterator[Path]:
    """A temporary copy of ``root/layers`` with ``mutation`` applied; removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=f"nodecycle-{mutation.name}-") as tmp:
        copy = Path(tmp, "layers")
        shutil.copytree(root / "layers", copy, ignore=shutil.ignore_patterns("__pycache__"))
        target = copy / mutation.file
        text = target.read_text()
        if text.count(mutation.old) != 1:
            raise PatchDoesNotApply(
                f"mutation {mutation.name}: layers/{mutation.file} contains {text.count(mutation.old)} copies of "
                f"the text to replace (1 expected): {mutation.old!r}"
            )
        target.write_text(text.replace(mutation.old, mutation.new))
        yield copy


@dataclass(frozen=True)
class MutationResult:
    mutation: Mutation
    caught: bool
    invariant: str | None
    seed: int
    scenario: int | None
    scenarios_run: int
    seconds: float


def check_mutation(
    root: Path,
    mutation: Mutation,
    *,
    seed: int,
    max_scenarios: int,
    kinds: tuple[str, ...] | None = None,
    warm_up: bool = True,
    faults: bool = True,
    progress: Callable[[str], None] = lambda _: None,
) -> MutationResult:
    """Run scenarios on the mutated product until a violation is found (or ``max_scenarios`` ran); ``faults``
    False: the scenarios' stories without their faults."""
    began = time.monotonic()
    with mutated_layer(root, mutation) as layer:
        report = run_campaign(
            scenarios=max_scenarios,
            seed=seed,
            root=root,
            layer_dir=layer,
            kinds=kinds or mutation.kinds,
            shrink=False,
            warm_up=warm_up,
            faults=faults,
            forge=mutation.forge,
            stop_at_first=True,
            progress=progress,
        )
    finding = report.findings[0] if report.findings else None
    return MutationResult(
        mutation=mutation,
        caught=finding is not None,
        invariant=", ".join(sorted({v.invariant for v in finding.violations})) if finding else None,
        seed=seed,
        scenario=finding.scenario.index if finding else None,
        scenarios_run=report.scenarios,
        seconds=time.monotonic() - began,
    )


def table(results: list[MutationResult]) -> str:
    lines = [
        f"{'mutation':<26} {'caught':<7} {'by invariant':<28} {'seed':<6} {'scenario':<9} {'runs':<5} seconds"
    ]
    for r in results:
        lines.append(
            f"{r.mutation.name:<26} {'yes' if r.caught else 'NO':<7} {r.invariant or '-':<28} {r.seed:<6} "
            f"{'-' if r.scenario is None else r.scenario:<9} {r.scenarios_run:<5} {r.seconds:.0f}"
        )
    return "\n".join(lines)
