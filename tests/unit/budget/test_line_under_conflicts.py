"""First come, first served under a storm of conflicting writes (409s): a node's place in line is the time it asked,
not the time its write won. Each write that loses its race reads the budget again and decides again after a
jittered backoff (up to 8 attempts, seconds in all); 20 drains asking within a fifth of a second on the sandbox's API
server joined the line in the order their writes won, 42-87 of 190 pairs the other way round."""

from __future__ import annotations

from nodecycle.domain.budget import BudgetDocument, SlotReason
from tests.unit.budget.fakes import BudgetFactory, FakeClock, MemoryBudgetStore, slot


def test_a_node_whose_write_lost_a_race_keeps_the_place_of_the_time_it_asked(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given a budget of one slot, held
    blue = make_budget("1", None)
    assert blue.acquire(slot("held")).granted

    # When node a asks, and its write loses the race to node b, which asked a second later (a's write tried again
    # after its backoff)
    def b_asks() -> None:
        clock.advance(1)
        assert blue.acquire(slot("b")).reason is SlotReason.NO_ROOM
        clock.advance(1)

    store.interleave(b_asks)
    assert blue.acquire(slot("a")).reason is SlotReason.NO_ROOM

    # Then a is first in line, b second, and the document lists them so
    doc = BudgetDocument.from_json(store.text or "")
    assert [w.node for w in doc.waiters] == ["a", "b"]
    assert blue.acquire(slot("a")).position == 1
    assert blue.acquire(slot("b")).position == 2
