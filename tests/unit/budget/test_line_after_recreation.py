"""A waiter joining the line of a document created (its ConfigMap deleted and created again) after it began to wait
takes its place back: its waiting since, which orders the line (first come, first served). Only then: a waiter
whose place expired in the document it joins again (it stopped asking for a TTL) joins at the end, as ever."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest

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


@pytest.mark.parametrize(
    ("created_at", "since"),
    [
        (START - timedelta(minutes=1), START - timedelta(minutes=1) + CREATION_MARGIN),
        (None, START - timedelta(minutes=10)),
    ],
    ids=["began-waiting-within-the-margin-after-the-creation", "creation-untold-by-the-store"],
)
def test_a_waiter_whose_place_the_documents_creation_does_not_tell_joins_as_of_now(
    make_budget: BudgetFactory,
    store: MemoryBudgetStore,
    clock: FakeClock,
    created_at: datetime | None,
    since: datetime,
) -> None:
    # Given a document created a minute ago, or a store that does not tell when it was created, its one slot taken
    if created_at is None:
        assert store.created_at is None
    else:
        store.created_at = created_at
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("n1")).granted

    # When n2 asks, waiting since within the margin after the creation (or since ten minutes before, untold)
    assert not blue.acquire(replace(slot("n2"), waiting_since=since)).granted

    # Then it joins the line as of now: the line stays as asked
    assert waiting_since(store) == [("n2", clock.now())]
