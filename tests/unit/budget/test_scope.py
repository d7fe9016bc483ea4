"""What a percent limit is of: the nodes that can serve or that a drain took out of service, not the node
objects that outlive their instances (the cloud provider deletes them seconds to a minute later)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from nodecycle.domain.budget import NodeState
from nodecycle.domain.policy import Quantity
from tests.unit.budget.fakes import BudgetFactory, FakeClock, FakeInventory, MemoryBudgetStore, node, slot


@pytest.mark.parametrize("count_unavailable", [False, True], ids=["metadata", "status"])
@pytest.mark.parametrize(("total", "per_zone"), [("50%", None), ("10", "50%")], ids=["total", "per-zone"])
@pytest.mark.parametrize("drained_by", ["blue", "green"])
def test_nodes_drained_and_given_back_leave_a_percents_scope_while_their_objects_linger(
    make_budget: BudgetFactory,
    inventory: FakeInventory,
    count_unavailable: bool,
    total: str,
    per_zone: str | None,
    drained_by: str,
) -> None:
    # Given g1 and g2 drained and given back (by this owner or another), their instances terminated while
    # their node objects linger, cordoned and NotReady; o1, o2 running and two new nodes joined
    inventory.nodes = [node("g1"), node("g2"), node("o1"), node("o2")]
    drainer = make_budget("4", None, owner=drained_by, count_unavailable=count_unavailable)
    for name in ("g1", "g2"):
        assert drainer.acquire(slot(name, owner=drained_by)).granted
        drainer.release(name, f"rec-{name}")
    lingering = [node(name, schedulable=False, ready=False) for name in ("g1", "g2")]
    inventory.nodes = [*lingering, node("o1"), node("o2"), node("n1"), node("n2")]
    budget = make_budget(total, per_zone, count_unavailable=count_unavailable)

    # When the nodes that are there ask: 50% of 4 is 2
    assert budget.acquire(slot("o1")).granted
    assert budget.acquire(slot("o2")).granted

    # Then a third waits: of 6 node objects, 50% would have let 3 of the 4 nodes go
    assert not budget.acquire(slot("n1")).granted
    assert [v.nodes_in_scope for v in budget.snapshot().limits if v.owner == "blue"] == [4]


def test_a_node_given_back_and_held_again_stays_in_scope(
    make_budget: BudgetFactory, inventory: FakeInventory
) -> None:
    # Given n1 drained by one lifecycle of its instance (a rebalance drain), then held by the next (its
    # terminate hook's): the node is there, drained, and a drain holds it
    inventory.nodes = [node("n1"), node("n2"), node("n3"), node("n4")]
    budget = make_budget("50%", None)
    assert budget.acquire(slot("n1")).granted
    budget.release("n1", "rec-n1")
    assert budget.acquire(replace(slot("n1"), record_id="rec-n1-next")).granted

    # When another node asks, Then 50% of the 4 nodes in scope lets it go
    assert budget.acquire(slot("n2")).granted
    assert not budget.acquire(slot("n3")).granted


def test_a_node_still_there_a_ttl_after_its_release_counts_in_scope_and_as_unavailable(
    make_budget: BudgetFactory, inventory: FakeInventory, clock: FakeClock
) -> None:
    # Given g1 drained and given back, still listed a TTL later, cordoned and NotReady (not an instance
    # the cloud provider deletes: something else holds it)
    inventory.nodes = [node("g1"), node("n1"), node("n2"), node("n3")]
    budget = make_budget("50%", None, count_unavailable=True, ttl=timedelta(seconds=60))
    assert budget.acquire(slot("g1")).granted
    budget.release("g1", "rec-g1")
    inventory.nodes[0] = node("g1", schedulable=False, ready=False)
    clock.advance(61)

    # When the others ask, Then it counts as any unavailable node of the 4: one more goes
    assert budget.acquire(slot("n1")).granted
    assert not budget.acquire(slot("n2")).granted


@pytest.mark.parametrize("count_unavailable", [False, True], ids=["metadata", "status"])
def test_a_refresh_with_lingering_nodes_makes_progress_and_never_drains_more_than_half_the_running_nodes(
    make_budget: BudgetFactory,
    inventory: FakeInventory,
    store: MemoryBudgetStore,
    clock: FakeClock,
    count_unavailable: bool,
) -> None:
    # Given 12 nodes under 50%, replaced as an instance refresh does (terminate, then launch): a drain takes
    # 2 rounds of 5 s, then its instance terminates, its node object lingers, NotReady, for 4 rounds (20 s),
    # and its replacement joins 2 rounds after the termination
    running = {f"old-{i}": node(f"old-{i}") for i in range(12)}
    lingering: dict[str, int] = {}  # node: the round its object is deleted
    joining: dict[str, int] = {}  # replacement node: the round it joins
    draining: dict[str, int] = {}  # node: the round its drain ends
    limit = Quantity.parse("50%")
    budget = make_budget("50%", None, count_unavailable=count_unavailable, ttl=timedelta(seconds=15))

    def listed() -> list[NodeState]:  # what the API server lists: the lingering objects cordoned, NotReady
        return [*running.values(), *(node(n, schedulable=False, ready=False) for n in lingering)]

    rounds = 0
    while joining or any(name.startswith("old-") for name in running):
        rounds += 1
        assert rounds <= 40, (
            f"the refresh stalled with {sorted(draining)} draining, {sorted(running)} running"
        )
        for name in [n for n, at in lingering.items() if at == rounds]:
            del lingering[name]
        for name in [n for n, at in joining.items() if at == rounds]:
            del joining[name]
            running[name] = node(name)
        for name in [n for n, at in draining.items() if at == rounds]:
            del draining[name], running[name]
            lingering[name] = rounds + 4
            joining[f"new-{name}"] = rounds + 2
            budget.release(name, f"rec-{name}")
        inventory.nodes = listed()
        # When every old node not yet draining asks
        for name in sorted(n for n in running if n.startswith("old-") and n not in draining):
            if budget.acquire(slot(name)).granted:
                draining[name] = rounds + 2
                running[name] = node(name, schedulable=False)
                inventory.nodes = listed()
        # Then no more than half the nodes whose instances run are drained at once
        assert len(draining) <= limit.resolve(len(running)), f"round {rounds}: {sorted(draining)}"
        clock.advance(5)
    doc = store.read()
    assert doc is not None
    assert doc.holders == ()
