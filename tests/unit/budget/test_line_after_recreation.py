"""A waiter joining the line of a document created (its ConfigMap deleted and created again) after it began to wait
takes its place back: its waiting since, which orders the line (first come, first served). Only then: a waiter
whose place expired in the document it joins again (it stopped asking for a TTL) joins at the end, as ever."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from nodecycle.domain.budget.rules import CREATION_MARGIN
from tests.unit.budget.conftest import TTL
from tests.unit.budget.fakes import START, BudgetFactory, FakeClock, MemoryBudgetStore, slot


def waiting_since(store: MemoryBudgetStore) -> list[tuple[str, datetime]]:
    """The line as stored, in the order the waiters joined it: each waiter's node and waiting since."""
    doc = store.read()
    assert doc is not None
    return [(w.node, w.waiting_since) for w in doc.waiters]


def test_a_waiter_whose_place_went_with_the_configmap_joins_the_new_line_in_it(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given the ConfigMap created again now, its one slot taken, and n3 asking first
    store.uninstall()
    store.reinstall(at=START)
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("n1")).granted
    assert not blue.acquire(slot("n3")).granted

    # When n2, waiting since ten minutes before, asks again
    clock.advance(5)
    assert not blue.acquire(replace(slot("n2"), waiting_since=START - timedelta(minutes=10))).granted

    # Then it stands before n3, as it did before the ConfigMap went; and the slot n1 gives back is n2's
    assert waiting_since(store) == [("n3", START), ("n2", START - timedelta(minutes=10))]
    assert [(w.position, w.node) for w in blue.snapshot().waiters] == [(1, "n2"), (2, "n3")]
    assert blue.release("n1", "rec-n1") == ["rec-n2"]


def test_a_waiter_whose_place_expired_in_the_document_it_joins_goes_to_the_end(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given a document created long ago, its one slot taken; n2 waited in it and stopped asking (its place expired)
    store.created_at = START - timedelta(hours=1)
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("n1")).granted
    assert not blue.acquire(slot("n2")).granted
    clock.advance(TTL.total_seconds() / 2)
    assert blue.acquire(slot("n1")).granted  # (n1's slot renewed)
    assert not blue.acquire(slot("n3")).granted
    clock.advance(TTL.total_seconds() / 2 + 1)

    # When n2 asks again, telling since when it waits
    asked = blue.acquire(replace(slot("n2"), waiting_since=START))

    # Then it joins behind n3, as of now
    assert not asked.granted
    assert waiting_since(store) == [("n3", START + TTL / 2), ("n2", clock.now())]


def test_a_lifecycle_that_began_waiting_within_the_margin_after_the_creation_joins_as_of_now(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    store.created_at = START - timedelta(minutes=1)
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("n1")).granted

    since = store.created_at + CREATION_MARGIN
    assert not blue.acquire(replace(slot("n2"), waiting_since=since)).granted

    assert waiting_since(store) == [("n2", clock.now())]


def test_a_store_that_does_not_tell_when_the_document_was_created_keeps_the_line_as_asked(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    assert store.created_at is None
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("n1")).granted

    assert not blue.acquire(replace(slot("n2"), waiting_since=START - timedelta(minutes=10))).granted

    assert waiting_since(store) == [("n2", clock.now())]
