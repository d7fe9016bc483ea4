"""A node kept out of a full line (QUEUE_FULL) asks again from outside it, and tells since when it waits (its record's
``slot_waiting_since``, the request's ``waiting_since``). When a place frees, whoever asked first took it: a node that
came after it, an hour later included. It now takes the place of the youngest untouched waiter of its stack that came
after it, as a drain in progress does (``rules._made_room``), and that one asks again from outside; never another
stack's (invariant 3), never one that came before it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from nodecycle.domain.budget import SlotReason, rules
from tests.unit.budget.fakes import BudgetFactory, FakeClock, RecordingMetrics, slot


def test_a_node_kept_out_of_a_full_line_goes_before_a_node_that_came_after_it(
    make_budget: BudgetFactory, clock: FakeClock, metrics: RecordingMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of one slot held by n0, a line at its maximum (n1, n2), and k kept out of it
    monkeypatch.setattr(rules, "MAX_WAITERS", 2)
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("n0")).granted
    for name in ("n1", "n2"):
        clock.advance(1)
        assert blue.acquire(slot(name)).reason is SlotReason.NO_ROOM
    clock.advance(1)
    kept_since = clock.now()
    assert blue.acquire(slot("k")).reason is SlotReason.QUEUE_FULL

    # When a place frees (n1 leaves), and a node that came after k asks first, then k asks again
    clock.advance(10)
    blue.release("n1", "rec-n1")
    clock.advance(1)
    assert blue.acquire(slot("late")).reason is SlotReason.NO_ROOM
    clock.advance(20)
    again = blue.acquire(replace(slot("k"), waiting_since=kept_since))

    # Then k waits in line before the node that came after it, which gives its place up, told and counted
    assert again.reason is SlotReason.NO_ROOM
    assert [w.node for w in blue.snapshot().waiters] == ["n2", "k"]
    assert blue.snapshot().waiters[1].waiting_seconds == (clock.now() - kept_since).total_seconds()
    assert metrics.values("BudgetQueueFull") == [1, 1]  # (k kept out, then "late" shed)
    assert blue.acquire(slot("late")).reason is SlotReason.QUEUE_FULL


def test_a_node_kept_out_of_a_full_line_takes_no_place_of_one_that_came_before_it_nor_of_another_stack(
    make_budget: BudgetFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a line at its maximum: blue's n1, then green's g1 that came after k was kept out
    monkeypatch.setattr(rules, "MAX_WAITERS", 2)
    blue = make_budget(total="1", per_zone=None)
    green = make_budget(total="1", per_zone=None, owner="green")
    assert blue.acquire(slot("n0")).granted
    clock.advance(1)
    assert blue.acquire(slot("n1")).reason is SlotReason.NO_ROOM
    clock.advance(1)
    assert blue.acquire(slot("n2")).reason is SlotReason.NO_ROOM
    kept_since = clock.now()
    clock.advance(1)
    assert blue.acquire(slot("k")).reason is SlotReason.QUEUE_FULL
    blue.release("n2", "rec-n2")
    clock.advance(1)
    assert green.acquire(slot("g1", owner="green")).reason is SlotReason.NO_ROOM

    # When k asks again, kept out since before g1 came
    again = blue.acquire(replace(slot("k"), waiting_since=kept_since))

    # Then it is kept out still: n1 came before it, g1 is green's
    assert again.reason is SlotReason.QUEUE_FULL
    assert [w.node for w in blue.snapshot().waiters] == ["n1", "g1"]
