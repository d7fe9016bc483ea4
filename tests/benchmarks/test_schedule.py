"""The refresh benchmarks' measures of idle slots, on hand-made schedules: one slot's idle time is not the
longest stretch during which some slot was free."""

from __future__ import annotations

import pytest

from benchmarks.records import BudgetWrite, Drain, Entry, Limits
from benchmarks.schedule import Budget, idle_gaps, idle_slot_seconds
from benchmarks.wake import handovers

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
