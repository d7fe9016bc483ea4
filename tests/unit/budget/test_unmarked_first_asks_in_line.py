"""A first ask that finds no room in a document created (its ConfigMap deleted and created again) after its lifecycle
began, and takes a new place in line: it cannot be told from a late delivery of a lifecycle that gave its slot back,
whose mark went with the ConfigMap before (a duplicate of the ask that read its record before the drain went on).
As a renewal's new place (tests/unit/budget/test_unmarked_renewals.py), it is judged on the lifecycle's record in
the same write: over, the node is marked given back and the ask takes no place; waiting still, it takes its place
(back, when it tells since when it waits)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from nodecycle.domain.budget import SlotReason, SlotRequest
from tests.unit.budget.fakes import BudgetFactory, FakeClock, MemoryBudgetStore, slot
from tests.unit.budget.test_unmarked_renewals import BEGAN, Records, recreated


def begun_now(request: SlotRequest, clock: FakeClock) -> SlotRequest:
    """``request`` of a lifecycle that began now, after the ConfigMap was created again (past the margin)."""
    return replace(request, since=clock.now())


def test_a_late_first_ask_of_a_lifecycle_over_takes_no_place_in_line_after_the_configmap_is_recreated(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again, a budget of one slot held by n3, and n2 waiting for it
    records = Records(over={"rec-n1"})
    recreated(store)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)
    clock.advance(60)
    assert blue.acquire(begun_now(slot("n3"), clock)).granted
    assert not blue.acquire(begun_now(slot("n2"), clock)).granted

    # When a late delivery of n1's first ask runs (its lifecycle waited in line since before the ConfigMap went,
    # then drained and gave its slot back), and finds no room
    late = replace(slot("n1"), token="tok", since=BEGAN, waiting_since=BEGAN + timedelta(seconds=5))
    asked = blue.acquire(late)

    # Then it is refused as a late delivery, its record read once, and takes no place: the slot n3 gives back is
    # n2's (in n1's place, first in line, it was passed to n1's lifecycle, idle until its place's TTL)
    assert (asked.granted, asked.reason) == (False, SlotReason.RELEASED)
    assert records.asked == ["rec-n1"]
    assert [w.node for w in blue.snapshot().waiters] == ["n2"]
    assert blue.release("n3", "rec-n3") == ["rec-n2"]
    assert blue.acquire(late).reason is SlotReason.RELEASED


def test_a_first_ask_of_a_lifecycle_waiting_still_takes_its_place_back_and_reads_its_record_once(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again, a budget of one slot held by n3, and n2 waiting for it
    records = Records()
    recreated(store)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)
    clock.advance(60)
    assert blue.acquire(begun_now(slot("n3"), clock)).granted
    assert not blue.acquire(begun_now(slot("n2"), clock)).granted

    # When n1, waiting in line since before the ConfigMap went, asks again, twice
    waiting = replace(slot("n1"), token="tok", since=BEGAN, waiting_since=BEGAN + timedelta(seconds=5))
    asked = blue.acquire(waiting)
    clock.advance(120)
    again = blue.acquire(waiting)

    # Then it waits in its place back, first; its record read at its first ask only
    assert [(d.granted, d.reason, d.position) for d in (asked, again)] == [(False, SlotReason.NO_ROOM, 1)] * 2
    assert records.asked == ["rec-n1"]
    assert blue.release("n3", "rec-n3") == ["rec-n1"]


def test_a_first_ask_of_a_lifecycle_begun_after_the_document_reads_no_record(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    records = Records(over={"rec-n1"})
    recreated(store)
    blue = make_budget(total="1", per_zone=None, lifecycles=records)
    clock.advance(60)
    assert blue.acquire(begun_now(slot("n3"), clock)).granted

    asked = blue.acquire(begun_now(replace(slot("n1"), token="tok"), clock))

    assert (asked.granted, asked.reason) == (False, SlotReason.NO_ROOM)
    assert records.asked == []
