"""The refresh benchmarks' measures of idle slots, on hand-made schedules: one slot's idle time is not the
longest stretch during which some slot was free."""

from __future__ import annotations

import pytest

from benchmarks.records import BudgetWrite, Drain, Entry, Limits
from benchmarks.refresh import broken_rules
from benchmarks.schedule import Budget, idle_gaps, idle_slot_seconds
from benchmarks.wake import handovers
from nodecycle_sandbox.aws.records import TERMINATING, ActionRecord
from nodecycle_sandbox.kube import HistoryEntry
from nodecycle_sandbox.kube.meta import ZONE_LABEL

BUDGET = Budget(total=2, per_zone=2)
LIMITS = {"a": Limits(total=2, per_zone=None, other_zone=2)}


def test_two_short_hand_overs_in_a_row_are_one_stretch_but_two_seconds_of_one_slot() -> None:
    # Given two slots, each handed over with 1 s of idle, the second hand-over starting as the first ends
    drains = [
        Drain("n1", "z", 0.0, 0.0, 2.0),  # slot 1: n1 until 2, then n3 from 3
        Drain("n2", "z", 0.0, 0.0, 3.0),  # slot 2: n2 until 3, then n4 from 4
        Drain("n3", "z", 0.0, 3.0, 9.0),
        Drain("n4", "z", 0.0, 4.0, 9.0),
    ]

    # When the idle time is measured, Then the stretch with some slot free runs from 2 to 4 s (merged)
    assert idle_gaps(drains, BUDGET, 0.0, 9.0) == [(2.0, 4.0)]
    # ...and the slot-seconds lost are 1 s per slot, 2 in all
    assert idle_slot_seconds(drains, BUDGET, 0.0, 9.0) == pytest.approx(2.0)


def test_a_hand_over_counts_one_slot_from_its_holders_completion_to_the_next_cordon() -> None:
    # Given n1 completed at 2, its slot released at 2.5, n2 granted it at 2.7 and cordoned at 3
    writes = [
        BudgetWrite(1.0, (Entry("n1", "z", "a"),), (Entry("n2", "z", "a"),), LIMITS),
        BudgetWrite(2.5, (), (Entry("n2", "z", "a"),), LIMITS),
        BudgetWrite(2.7, (Entry("n2", "z", "a"),), (), LIMITS),
    ]

    # When the hand-overs are paired
    found = handovers(writes, {"n1": 0.5, "n2": 3.0}, {"n1": 2.0})

    # Then one: 0.5 s from the release to the cordon, 1 s of the slot doing nothing
    assert [(h.node, h.latency, h.idle) for h in found] == [("n2", pytest.approx(0.5), pytest.approx(1.0))]


def test_a_release_that_passes_its_slot_on_in_the_same_write_is_a_hand_over_too() -> None:
    # Given n1 completed at 2, and the write of 2.5 that released its slot granting it to the waiter n2
    writes = [
        BudgetWrite(1.0, (Entry("n1", "z", "a"),), (Entry("n2", "z", "a"),), LIMITS),
        BudgetWrite(2.5, (Entry("n2", "z", "a"),), (), LIMITS),
    ]

    # When the hand-overs are paired, Then one, from that write to n2's cordon at 3
    found = handovers(writes, {"n1": 0.5, "n2": 3.0}, {"n1": 2.0})
    assert [(h.node, h.granted_at, h.latency, h.idle) for h in found] == [
        ("n2", 2.5, pytest.approx(0.5), pytest.approx(1.0))
    ]


def _node(version: int, at: float, name: str, *, cordoned: bool) -> HistoryEntry:
    node = {
        "kind": "Node",
        "metadata": {"name": name, "labels": {ZONE_LABEL: "z"}},
        "spec": {"unschedulable": cordoned, "providerID": f"aws:///z/i-{name}"},
    }
    return HistoryEntry(version, at, "patch", "nodes", "", name, "test", False, node)


def _completed(name: str, at: float) -> ActionRecord:
    return ActionRecord(
        f"t-{name}", "g", "h", f"i-{name}", TERMINATING, "ABANDON", 300.0, 3000.0, 0.0,
        finished_at=at, result="CONTINUE", outcome="completed",
    )  # fmt: skip


def test_a_refresh_that_drained_more_nodes_at_once_than_its_budget_is_not_measured() -> None:
    # Given n1 and n2 cordoned together (from 1 and 2 s, completed at 5 and 6 s) under a budget of 1
    history = [
        _node(1, 0.0, "n1", cordoned=False),
        _node(2, 0.0, "n2", cordoned=False),
        _node(3, 1.0, "n1", cordoned=True),
        _node(4, 2.0, "n2", cordoned=True),
    ]
    actions = [_completed("n1", 5.0), _completed("n2", 6.0)]

    # When the run is checked against its rules, Then the breach is named, in all and in the zone
    assert broken_rules(history, actions, Budget(total=1, per_zone=1)) == [
        "2 nodes cordoned at once (budget 1)",
        "2 nodes cordoned at once in zone z (budget 1)",
    ]
    # ...and the same run under a budget of 2 was fair
    assert broken_rules(history, actions, Budget(total=2, per_zone=2)) == []
    # ...as one where n2 was cordoned only once n1's action was completed (its slot given back)
    later = [*history[:3], _node(4, 5.5, "n2", cordoned=True)]
    assert broken_rules(later, actions, Budget(total=1, per_zone=1)) == []
