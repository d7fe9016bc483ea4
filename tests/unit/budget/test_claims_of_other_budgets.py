"""A slot asked for a node another stack claims (SlotRequest.claimed_by): only a budget that stack writes in can
tell its drain of the node dead (no holder nor place of it there)."""

from __future__ import annotations

from dataclasses import replace

from nodecycle.domain.budget import SlotReason
from tests.unit.budget.fakes import BudgetFactory, MemoryBudgetStore, slot


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
