"""A full queue (``MAX_WAITERS``, or the document's byte bound) and the drains in progress that lose their slot.

In a refresh of thousands of nodes the line holds its maximum of untouched nodes, and the others ask again from
outside it, each at its own retry. A drain in progress whose slot expired (its function failing for a TTL) or went
with the ConfigMap must pause and wait with precedence (invariant 9: disruption already done goes on before any new
one). Told the queue is full, it waited outside the line among the thousands of untouched nodes, each place freed in
the line going to whichever of them asked first: its node cordoned and half drained meanwhile, for as long as the
refresh lasted. It now takes the place of the youngest untouched waiter of its own stack (never another's:
invariant 3), told and counted, as a forced slot sheds one."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from nodecycle.domain.budget import SlotReason, rules
from tests.unit.budget.conftest import TTL
from tests.unit.budget.fakes import BudgetFactory, FakeClock, RecordingMetrics, slot


def test_a_drain_in_progress_that_lost_its_slot_takes_a_place_in_a_full_line_before_the_untouched_nodes(
    make_budget: BudgetFactory, clock: FakeClock, metrics: RecordingMetrics, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a budget of one slot held by n0, a line of three untouched nodes at its maximum, and p's drain in
    # progress whose slot expired while its function failed (the slot taken by n0 since)
    monkeypatch.setattr(rules, "MAX_WAITERS", 3)
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("p")).granted
    clock.advance(TTL.total_seconds() + 1)
    assert blue.acquire(slot("n0")).granted
    for i in (1, 2, 3):
        clock.advance(1)
        assert blue.acquire(slot(f"n{i}")).reason is SlotReason.NO_ROOM

    # When p's drain renews its slot
    renewed = blue.renew(replace(slot("p"), in_progress=True))

    # Then it waits in line (it pauses), in the place of the youngest untouched node, which is told and counted
    assert (renewed.granted, renewed.reason, renewed.position) == (False, SlotReason.LOST, 1)
    assert [w.node for w in blue.snapshot().waiters] == ["p", "n1", "n2"]
    assert metrics.values("BudgetQueueFull") == [1]
    # and asks again from outside the line, as one that found it full
    assert blue.acquire(slot("n3")).reason is SlotReason.QUEUE_FULL
    # while the next slot freed goes to p
    assert blue.release("n0", "rec-n0") == ["rec-p"]


def test_another_stacks_waiters_are_never_shed_for_a_drain_in_progress(
    make_budget: BudgetFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a line at its maximum of green's untouched nodes, and blue's drain in progress whose slot expired
    monkeypatch.setattr(rules, "MAX_WAITERS", 2)
    blue = make_budget(total="1", per_zone=None)
    green = make_budget(total="1", per_zone=None, owner="green")
    assert blue.acquire(slot("p")).granted
    clock.advance(TTL.total_seconds() + 1)
    assert green.acquire(slot("g0", owner="green")).granted
    for i in (1, 2):
        assert green.acquire(slot(f"g{i}", owner="green")).reason is SlotReason.NO_ROOM

    # When blue's drain renews its slot
    renewed = blue.renew(replace(slot("p"), in_progress=True))

    # Then it waits outside the line, as before: green's places are green's
    assert renewed.reason is SlotReason.QUEUE_FULL
    assert [w.node for w in green.snapshot().waiters] == ["g1", "g2"]


def test_no_drain_in_progress_gives_up_its_place_in_a_full_line_for_another(
    make_budget: BudgetFactory, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a line at its maximum whose waiters are all drains in progress of blue
    monkeypatch.setattr(rules, "MAX_WAITERS", 2)
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("n0")).granted
    for i in (1, 2):
        assert blue.renew(replace(slot(f"n{i}"), in_progress=True)).reason is SlotReason.LOST
    clock.advance(timedelta(seconds=5).total_seconds())

    # When a third drain in progress renews
    renewed = blue.renew(replace(slot("n3"), in_progress=True))

    # Then it waits outside: no drain in progress gives up its place for another
    assert renewed.reason is SlotReason.QUEUE_FULL
    assert [w.node for w in blue.snapshot().waiters] == ["n1", "n2"]
