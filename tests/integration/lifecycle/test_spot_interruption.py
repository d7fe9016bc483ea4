"""A Spot interruption in the middle of an instance refresh at full budget, end to end: EC2's warning
(compressed to 40 s), the group's terminate hook a few seconds after it, EC2 reclaiming the instance at the
end of the warning. Judged from the API server's history, the budget ConfigMap's versions and the emulated
Auto Scaling actions."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox import Sandbox
from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.aws.records import TERMINATING
from nodecycle_sandbox.checks import completed_before_drained, last_pod_gone, pdb_breaches, released_at
from nodecycle_sandbox.kube import HistoryEntry
from tests.integration.lifecycle.harness import WORKLOADS, node_of, records, running

pytestmark = pytest.mark.slow

WARNING_SECONDS = 40.0
HOOK_AFTER = 3.0
LIMIT, PER_ZONE = 2, 1
# Pods that take 4 s to stop: the refresh's drains hold the budget full for seconds, longer than the Spot
# lifecycle takes to ask for its slot even on a loaded machine (with the harness's 0.3-0.5 s, a drain could end
# first in a whole-suite run, and the Spot drain then took a free slot: nothing to force)
SLOW_TO_STOP = {
    **WORKLOADS,
    "deployments": [{**deployment, "shutdownSeconds": 4.0} for deployment in WORKLOADS["deployments"]],
}


def test_a_spot_interruption_during_a_refresh_at_full_budget_drains_in_time_holding_a_slot() -> None:
    # Given 6 Spot nodes over 3 zones, a budget of 2 at once (1 per zone), and a refresh replacing half of
    # them at a time, its drains filling the budget
    with running(size=6, spot=True, workloads=SLOW_TO_STOP) as sandbox:
        old = set(sandbox.asg.in_state("InService"))
        sandbox.kube.reset_history()
        refresh = sandbox.asg.start_refresh(min_healthy_percentage=50)
        wait_for(lambda: _cordoned(sandbox) >= LIMIT, 60, "the refresh's drains filling the budget")
        # (held full until the Spot lifecycle has asked for its slot: the refresh's drains wait for their pods to
        # stop, which the controllers held back do not; on a loaded machine the Spot lifecycle asked seconds late,
        # after the drains had ended, took a slot left free, and there was nothing to force)
        with _budget_held_full(sandbox):
            terminating = {i for i, s in sandbox.asg.instances().items() if s.startswith("Terminating")}

            # When EC2 interrupts a node the refresh has not reached yet
            victim = sorted(old - terminating)[0]
            victim_node = node_of(sandbox, victim)
            sandbox.asg.interrupt_spot(victim, warning_seconds=WARNING_SECONDS, hook_after=HOOK_AFTER)
            warned_at = next(
                n.sent_at
                for n in sandbox.aws.notifications()
                if n.payload.get("detail-type") == "EC2 Spot Instance Interruption Warning"
            )
            wait_for(lambda: victim_node in _holders_now(sandbox), WARNING_SECONDS, "the Spot drain's slot")
        store = records(sandbox)
        spot = wait_for(
            lambda: (r := store.get(f"{victim}/{Transition.SPOT_INTERRUPTION.short}")) and r.finished and r,
            WARNING_SECONDS,
            "the Spot interruption's drain",
        )
        sandbox.asg.wait_refresh(refresh, timeout=180)
        wait_for(lambda: victim not in sandbox.asg.instances(), WARNING_SECONDS, "the reclaim")

        history = sandbox.kube.history()
        actions = sandbox.aws.actions()
        (hook,) = [a for a in actions if a.instance_id == victim and a.transition == TERMINATING]
        hook_record = store.get(f"{victim}/{Transition.TERMINATING.short}/{hook.token}")

    # Then its node was emptied within the warning, before EC2 reclaimed the instance
    emptied = last_pod_gone(history, victim_node)
    assert emptied is not None
    assert emptied - warned_at < WARNING_SECONDS
    assert spot.outcome is None or "gone" not in spot.outcome
    # ...it held a budget slot meanwhile: a holder entry for it although the budget was full (its own first entry:
    # the node's terminate lifecycle, when it asked while the Spot drain held the node's slot, is passed that slot
    # once the drain ends, its entry then the node's last, not forced)
    entries = [
        h for h in _holder_entries(history) if h["node"] == victim_node and h.get("recordId") == spot.id
    ]
    assert entries, _holder_entries(history)
    assert entries[0].get("forced") is True, entries[0]
    # ...the voluntary drains around it never started beyond the budget, counting its slot
    # (a node's slot is released when its terminate action completes; the Spot node's when its drain ends)
    released = {**released_at(history, actions), victim_node: spot.updated_at.timestamp()}
    assert _voluntary_starts_over_budget(history, released, spot_node=victim_node) == []
    assert pdb_breaches(history) == []
    # ...and the terminate hook that came after the warning completed as soon as the drain was over, by
    # nodecycle, not by EC2's reclaim: the record says it found the node drained by the Spot interruption
    # (Auto Scaling's, HOOK_AFTER seconds after the warning, or the refresh's if it reached the node first)
    assert hook.started_at >= warned_at
    assert hook.outcome == "completed"
    assert hook.finished_at is not None
    drained_at = spot.updated_at.timestamp()
    assert hook.finished_at - max(hook.started_at, drained_at) < 10
    assert hook_record is not None
    assert hook_record.outcome == "drained-by:spot-interruption"
    refreshed = [a for a in actions if a.instance_id in old and a.transition == TERMINATING]
    assert completed_before_drained(history, refreshed) == []


@contextmanager
def _budget_held_full(sandbox: Sandbox) -> Iterator[None]:
    """Meanwhile the controllers are held back with the budget's LIMIT slots held by drains whose nodes still
    have pods to drain: their pods do not stop meanwhile, so those drains cannot end and give a slot back."""
    deadline = time.monotonic() + 60
    while True:
        with sandbox.kube.paused_controllers():
            with_pods = {
                (pod.get("spec") or {}).get("nodeName")
                for pod in sandbox.kube.objects("pods")
                if not any(o.get("kind") == "DaemonSet" for o in pod["metadata"].get("ownerReferences") or [])
            }
            if len(_holders_now(sandbox) & with_pods) >= LIMIT:
                yield
                return
        if time.monotonic() > deadline:
            raise TimeoutError("the budget never full with the controllers held back")
        time.sleep(0.1)


def _holders_now(sandbox: Sandbox) -> set[str]:
    configmap = sandbox.kube.get_object("configmaps", "nodecycle-budget", "nodecycle") or {}
    document = json.loads((configmap.get("data") or {}).get("budget.json") or "{}")
    return {holder["node"] for holder in document.get("holders", [])}


def _cordoned(sandbox: object) -> int:
    nodes = sandbox.kube.objects("nodes")  # type: ignore[attr-defined]
    return sum(1 for node in nodes if (node.get("spec") or {}).get("unschedulable"))


def _holder_entries(history: Sequence[HistoryEntry]) -> list[dict[str, object]]:
    """Every holder entry of every version of the budget ConfigMap, in order."""
    seen: list[dict[str, object]] = []
    for entry in history:
        if entry.kind == "ConfigMap" and entry.name == "nodecycle-budget" and not entry.removed:
            document = json.loads((entry.object.get("data") or {}).get("budget.json") or "{}")
            seen.extend(document.get("holders", []))
    return seen


def _voluntary_starts_over_budget(
    history: Sequence[HistoryEntry], released: dict[str, float], *, spot_node: str
) -> list[str]:
    """Voluntary drains that were cordoned while the budget (the Spot node's slot included) was full, in the
    cluster or in their zone. A node counts from its cordon to its uncordon, its removal, or the completion
    of its terminate action, whichever comes first."""
    spans: dict[str, tuple[float, float, str | None]] = {}
    since: dict[str, tuple[float, str | None]] = {}
    for entry in history:
        if entry.kind != "Node":
            continue
        cordoned = entry.unschedulable and not entry.removed
        if cordoned and entry.name not in since and entry.name not in spans:
            since[entry.name] = (entry.time, entry.zone)
        elif not cordoned and entry.name in since:
            start, zone = since.pop(entry.name)
            spans[entry.name] = (start, min(entry.time, released.get(entry.name, entry.time)), zone)
    for name, (start, zone) in since.items():
        spans[name] = (start, released.get(name, float("inf")), zone)
    over = []
    for name, (start, _, zone) in spans.items():
        if name == spot_node:
            continue
        others = [(z, n) for n, (s, e, z) in spans.items() if n != name and s < start < e]
        in_zone = [n for z, n in others if z == zone]
        if len(others) >= LIMIT or len(in_zone) >= PER_ZONE:
            over.append(f"{name} at {start:.2f}: {[n for _, n in others]}")
    return over
