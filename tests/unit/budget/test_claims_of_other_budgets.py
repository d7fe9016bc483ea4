"""A slot asked for a node another stack claims (SlotRequest.claimed_by): only a budget that stack writes in can
tell its drain of the node dead (no holder nor place of it there)."""

from __future__ import annotations

from dataclasses import replace

from nodecycle.domain.budget import SlotReason
from nodecycle.domain.budget.rules import LIMITS_RETENTION
from tests.unit.budget.fakes import BudgetFactory, FakeClock, MemoryBudgetStore, slot


def test_a_node_claimed_by_a_stack_that_writes_nothing_here_gets_no_slot(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given a budget only blue writes in
    blue = make_budget(owner="blue")
    assert blue.acquire(slot("n0")).granted

    # When blue asks for a node green claims
    decision = blue.acquire(replace(slot("n1"), claimed_by="green"))

    # Then it is refused, and neither holds nor waits for the node
    assert (decision.granted, decision.reason) == (False, SlotReason.CLAIMED_ELSEWHERE)
    doc = store.read()
    assert doc is not None
    assert "n1" not in {e.node for e in doc.entries()}


def test_a_node_claimed_by_a_stack_that_writes_here_and_holds_nothing_for_it_is_granted(
    make_budget: BudgetFactory,
) -> None:
    # Given a budget blue and green both write in, green holding nothing for node n1 (its drain died)
    blue, green = make_budget(owner="blue"), make_budget(owner="green")
    assert green.acquire(slot("n2", owner="green")).granted

    # When blue asks for n1, which green's dead drain left claimed, Then it is granted (the node is adopted)
    assert blue.acquire(replace(slot("n1"), claimed_by="green")).granted


def test_its_own_claim_is_no_other_stacks(make_budget: BudgetFactory) -> None:
    assert make_budget(owner="blue").acquire(replace(slot("n1"), claimed_by="blue")).granted


def test_a_slot_granted_before_another_stack_that_writes_nothing_here_claimed_the_node_is_given_up(
    make_budget: BudgetFactory, store: MemoryBudgetStore
) -> None:
    # Given blue granted node n1 (renewed a moment ago), in a budget only blue writes in
    blue = make_budget(owner="blue")
    assert blue.acquire(slot("n1")).granted

    # When its drain finds n1 claimed by green, which cordoned it first under a budget of its own, and asks again
    decision = blue.acquire(replace(slot("n1"), claimed_by="green"))

    # Then the slot is given up in that write (it would count green's drain here), and the node left to green
    assert (decision.granted, decision.reason) == (False, SlotReason.CLAIMED_ELSEWHERE)
    doc = store.read()
    assert doc is not None
    assert "n1" not in {e.node for e in doc.entries()}


def test_a_stack_whose_limits_are_past_their_day_writes_nothing_here_for_a_holder_renewed_lately_too(
    make_budget: BudgetFactory, store: MemoryBudgetStore, clock: FakeClock
) -> None:
    # Given green's last write in blue's budget (a drain over, its slot given back) a day ago less 30 s, and blue
    # granted node n1 then
    blue, green = make_budget(owner="blue"), make_budget(owner="green")
    assert green.acquire(slot("n2", owner="green")).granted
    green.release("n2", "rec-n2")
    clock.advance(LIMITS_RETENTION.total_seconds() - 30)
    assert blue.acquire(slot("n1")).granted

    # When, a minute on (green's limits a day and 30 s old, still in the document: nobody wrote since), blue's drain
    # finds n1 claimed by green and asks again, its holder renewed within a third of its TTL (100 s)
    clock.advance(60)
    decision = blue.acquire(replace(slot("n1"), claimed_by="green"))

    # Then green writes nothing here, as a write would find it (its limits pruned): the slot is given up, the node
    # left to green, not held to adopt it because no write pruned green's limits yet
    assert (decision.granted, decision.reason) == (False, SlotReason.CLAIMED_ELSEWHERE)
    doc = store.read()
    assert doc is not None
    assert "n1" not in {e.node for e in doc.entries()}
    assert "green" not in doc.limits
