"""A new slot the budget cannot vouch for (``SlotDecision.unmarked``): granted by a document created (its ConfigMap
deleted and created again) after the asking lifecycle began, which may have lost the mark of that lifecycle's
release with the one before. Only those: the asker reads its record for them, and for no other decision."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from nodecycle.domain.budget import SlotReason
from nodecycle.domain.budget.rules import CREATION_MARGIN
from tests.unit.budget.fakes import START, BudgetFactory, FakeClock, MemoryBudgetStore, slot


def test_a_lifecycle_that_began_before_the_configmap_was_created_again_gets_an_unmarked_slot(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again now, and a lifecycle that began a minute before
    store.uninstall()
    store.reinstall(at=START)
    asking = replace(slot("n1"), since=START - timedelta(minutes=1))

    # When it asks, and then asks again
    first = make_budget().acquire(asking)
    clock.advance(1)
    again = make_budget().acquire(asking)

    # Then its new slot is unmarked; the renewal of the slot it holds is not
    assert (first.granted, first.reason, first.unmarked) == (True, SlotReason.GRANTED, True)
    assert (again.granted, again.reason, again.unmarked) == (True, SlotReason.HELD, False)


def test_a_lifecycle_that_began_after_the_configmap_was_created_gets_its_slot_as_ever(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given the ConfigMap created a while ago, and a lifecycle that began past the creation's margin
    store.created_at = START - timedelta(minutes=5)
    asking = replace(slot("n1"), since=store.created_at + CREATION_MARGIN)

    # When it asks
    decision = make_budget().acquire(asking)

    # Then its slot is the budget's to vouch for: no record to read
    assert (decision.granted, decision.unmarked) == (True, False)


def test_a_lifecycle_that_began_within_the_margin_of_the_creation_is_taken_to_have_begun_before(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # (the creation time is to the second, and stamped by another clock)
    store.created_at = START - timedelta(minutes=5)
    asking = replace(slot("n1"), since=store.created_at + CREATION_MARGIN - timedelta(milliseconds=1))

    assert make_budget().acquire(asking).unmarked


def test_a_store_that_does_not_tell_when_the_document_was_created_vouches_for_every_slot(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    assert store.created_at is None
    decision = make_budget().acquire(slot("n1"))
    assert (decision.granted, decision.unmarked) == (True, False)


def test_a_denied_ask_is_never_unmarked(make_budget: BudgetFactory, store: MemoryBudgetStore) -> None:
    # Given the ConfigMap created again, and a budget of one slot taken
    store.reinstall(at=START)
    budget = make_budget(total="1", per_zone=None)
    assert budget.acquire(slot("n1")).granted

    # When a lifecycle that began before asks for another node
    waiting = budget.acquire(replace(slot("n2"), since=START - timedelta(minutes=1)))

    # Then it waits, unmarked or not: only a slot given is
    assert (waiting.granted, waiting.unmarked) == (False, False)
