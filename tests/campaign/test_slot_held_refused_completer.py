"""A completer whose writes DynamoDB refuses after its completion claim (its record's commit, or the state-change
record its completion writes first, denied) cannot take the claim back: it stands until the invocation it was made
in would have ended, as a killed completer's does, and the work message comes back within a visibility timeout.
The slot-held judge excuses that cost when a DynamoDB write naming the drain's own instance was denied during its
span, and only then (seed 307's scenario 4: a drain completed 67 s after its cordon, its claim held 60 s)."""

from __future__ import annotations

from nodecycle_sandbox.chaos.invariants import check
from nodecycle_sandbox.faults import Firing
from tests.campaign.test_invariants import T0, _node, _observation, _terminate


def _slot_held(firings: list[Firing]) -> list[str]:
    # (a node cordoned at 2 s whose action was completed at 80 s: 78 s, past 20 + 2 + 20 s)
    observation = _observation([_node(T0 + 2, cordoned=True)], actions=[_terminate(T0 + 80)], firings=firings)
    return [v.detail for v in check(observation) if v.invariant == "slot-held"]


def test_a_denied_write_of_the_drains_own_record_in_its_span_excuses_its_claims_hold_and_nothing_else_does() -> (
    None
):
    # Given a drain whose action was completed 78 s after its cordon: a violation with no fault
    assert _slot_held([])
    # When DynamoDB denied a write naming its instance during that span (its claimed record's commit, or the
    # state-change record its completion writes), Then its claim's hold is excused
    assert _slot_held([Firing(30.0, "f1", "aws-denied", "dynamodb.PutItem i-1")]) == []
    assert _slot_held([Firing(30.0, "f1", "aws-denied", "dynamodb.TransactWriteItems i-1")]) == []
    # But not by a denied read (nothing left standing), nor a write of another instance's record, nor one that
    # names no instance, nor one after the action was completed, nor a throttled write (retried, not refused)
    assert _slot_held([Firing(30.0, "f1", "aws-denied", "dynamodb.GetItem i-1")])
    assert _slot_held([Firing(30.0, "f1", "aws-denied", "dynamodb.PutItem i-2")])
    assert _slot_held([Firing(30.0, "f1", "aws-denied", "dynamodb.PutItem")])
    assert _slot_held([Firing(90.0, "f1", "aws-denied", "dynamodb.PutItem i-1")])
    assert _slot_held([Firing(30.0, "f1", "aws-throttle", "dynamodb.PutItem i-1")])
