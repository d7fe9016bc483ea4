"""A completer killed mid-completion holds the action's completion claim until its invocation would have ended (a
crash and a timeout look alike to the next completer): the slot-held judge excuses that cost when a completing
function was killed during the drain's span, and only then."""

from __future__ import annotations

from nodecycle_sandbox.chaos.invariants import check
from nodecycle_sandbox.faults import Firing
from tests.campaign.test_invariants import T0, _node, _observation, _terminate


def _slot_held(firings: list[Firing]) -> list[str]:
    # (a node cordoned at 2 s whose action was completed at 80 s: 78 s, past 20 + 2 + 20 s)
    observation = _observation([_node(T0 + 2, cordoned=True)], actions=[_terminate(T0 + 80)], firings=firings)
    return [v.detail for v in check(observation) if v.invariant == "slot-held"]


def test_a_completer_killed_in_the_drains_span_excuses_its_claims_hold_and_nothing_else_does() -> None:
    # Given a drain whose action was completed 78 s after its cordon: a violation with no fault
    assert _slot_held([])
    # When the function that completes it was killed during that span, Then its claim's hold is excused
    assert _slot_held([Firing(30.0, "f1", "worker-kill", "EipFunction")]) == []
    # But not by a kill of a function that completes nothing, nor by one after the action was completed
    assert _slot_held([Firing(30.0, "f1", "worker-kill", "IntakeFunction")])
    assert _slot_held([Firing(90.0, "f1", "worker-kill", "DrainFunction")])
