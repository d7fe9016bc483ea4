"""A write of the budget whose answer is lost (WriteOutcomeUnknown): read back, the document tells whether it
landed. Only the document as that write made it, byte for byte, is taken as its success; anything else leaves
the outcome unknown, for the step's retry to repair (see DisruptionBudget._landed)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nodecycle.domain.budget import BudgetDocument, SlotReason
from nodecycle.domain.budget.errors import WriteOutcomeUnknown
from nodecycle.domain.errors import TransientError
from tests.unit.budget.fakes import BudgetFactory, MemoryBudgetStore, slot


class ReadBackStore(MemoryBudgetStore):
    """A store whose first read after a lost answer (the read back) meets ``before_read`` first."""

    def __init__(self) -> None:
        super().__init__()
        self.before_read: Callable[[], object] | None = None
        self._lost = False

    def update[T](self, mutate: Callable[[BudgetDocument | None], tuple[BudgetDocument | None, T]]) -> T:
        try:
            return super().update(mutate)
        except WriteOutcomeUnknown:
            self._lost = True
            raise

    def read(self) -> BudgetDocument | None:
        hook, self.before_read = (self.before_read, None) if self._lost else (None, self.before_read)
        self._lost = False
        if hook is not None:
            hook()
        return super().read()


@pytest.fixture
def store() -> ReadBackStore:
    return ReadBackStore()


def test_a_release_whose_answer_is_lost_and_that_landed_wakes_those_it_passed_slots_to(
    make_budget: BudgetFactory, store: ReadBackStore
) -> None:
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("n0")).granted
    assert blue.acquire(slot("n1")).reason is SlotReason.NO_ROOM

    store.lose_answer()
    woken = blue.release("n0", "rec-n0")

    assert woken == ["rec-n1"]
    assert [h.node for h in blue.snapshot().holders] == ["n1"]


def test_a_lost_answer_is_not_taken_for_a_success_when_another_writer_wrote_before_the_read_back(
    make_budget: BudgetFactory, store: ReadBackStore
) -> None:
    # Given a release whose answer is lost, and another stack's ask written before the read back
    blue = make_budget(total="2", per_zone=None)
    green = make_budget(total="2", per_zone=None, owner="green")
    assert blue.acquire(slot("n0")).granted
    store.lose_answer()
    store.before_read = lambda: green.acquire(slot("g0", owner="green"))

    # When the release is written, Then its outcome stays unknown: the document does not show it as written
    # (the step's retry, a repeated release, repairs what it passed on)
    with pytest.raises(WriteOutcomeUnknown):
        blue.release("n0", "rec-n0")
    assert [h.node for h in blue.snapshot().holders] == ["g0"]


def test_a_lost_answer_whose_read_back_fails_stays_unknown(
    make_budget: BudgetFactory, store: ReadBackStore
) -> None:
    blue = make_budget(total="1", per_zone=None)
    assert blue.acquire(slot("n0")).granted
    store.lose_answer()

    def refused() -> None:
        raise TransientError("the API server is gone")

    store.before_read = refused
    with pytest.raises(WriteOutcomeUnknown):
        blue.release("n0", "rec-n0")
