"""A completer killed mid-completion holds the action's completion claim until its invocation would have ended (a
crash and a timeout look alike to the next completer): the slot-held judge excuses that cost when a completing
function was killed during the drain's span, and only then."""

from __future__ import annotations

from typing import Any

from nodecycle_sandbox.aws.records import TERMINATING, ActionRecord, InstanceHistory
from nodecycle_sandbox.chaos.invariants import check
from nodecycle_sandbox.chaos.plan import draw
from nodecycle_sandbox.chaos.world import Observation
from nodecycle_sandbox.faults import Firing
from nodecycle_sandbox.kube import HistoryEntry

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
T0 = 1000.0


def _slot_held(firings: list[Firing]) -> list[str]:
    cordon = HistoryEntry(
        0,
        T0 + 2,
        "patch",
        "nodes",
        "",
        NODE,
        "api",
        False,
        {
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {"topology.kubernetes.io/zone": "eu-west-1a"}},
            "spec": {"providerID": "aws:///eu-west-1a/i-1", "unschedulable": True},
        },
    )
    action = ActionRecord(
        token="tok",
        group="g",
        hook="nodecycle-terminate",
        instance_id="i-1",
        transition=TERMINATING,
        default_result="CONTINUE",
        heartbeat_timeout=30,
        global_timeout=180,
        started_at=T0 + 1,
        finished_at=T0 + 80,  # 78 s after the cordon: past 20 + 2 + 20 s
        result="CONTINUE",
        outcome="completed",
    )
    values: dict[str, Any] = {
        "scenario": draw(1, 0, faults=False),
        "groups": {"g": "chaos-a"},
        "started_at": T0,
        "acting_at": T0,
        "quiescent": True,
        "left_over": [],
        "actions": [action],
        "instances": [InstanceHistory("i-1", "g", "eu-west-1a", NODE, T0, T0)],
        "history": [cordon],
        "addresses": [],
        "final_addresses": {},
        "outcomes": {"tok": "drained"},
        "lost_kubelet": None,
        "firings": firings,
    }
    return [v.detail for v in check(Observation(**values)) if v.invariant == "slot-held"]


def test_a_completer_killed_in_the_drains_span_excuses_its_claims_hold_and_nothing_else_does() -> None:
    # Given a drain whose action was completed 78 s after its cordon: a violation with no fault
    assert _slot_held([])
    # When the function that completes it was killed during that span, Then its claim's hold is excused
    assert _slot_held([Firing(30.0, "f1", "worker-kill", "EipFunction")]) == []
    # But not by a kill of a function that completes nothing, nor by one after the action was completed
    assert _slot_held([Firing(30.0, "f1", "worker-kill", "IntakeFunction")])
    assert _slot_held([Firing(90.0, "f1", "worker-kill", "DrainFunction")])
