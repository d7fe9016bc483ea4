from __future__ import annotations

import pytest

from nodecycle.domain.budget import BudgetLimits
from nodecycle.domain.budget.document import NodeRef
from nodecycle.domain.budget.limits import owner_limits
from nodecycle.domain.policy import Quantity
from tests.unit.budget.fakes import START, node


@pytest.mark.parametrize(
    ("limit", "nodes", "expected"),
    [("25%", 10, 3), ("25%", 8, 2), ("10%", 3, 1), ("50%", 0, 1), ("100%", 7, 7), ("3", 100, 3)],
)
def test_a_percent_of_the_nodes_in_scope_rounds_up_and_is_at_least_one(
    limit: str, nodes: int, expected: int
) -> None:
    limits = BudgetLimits(Quantity.parse(limit))
    assert limits.resolve([node(f"n{i}") for i in range(nodes)]).total == expected


def test_a_per_zone_percent_is_of_the_nodes_of_that_zone() -> None:
    # Given 8 nodes in zone a, 3 in zone b and 2 without a zone label
    nodes = [node(f"a{i}", "a") for i in range(8)] + [node(f"b{i}", "b") for i in range(3)]
    nodes += [node(f"x{i}", None) for i in range(2)]

    # When 25% per zone is resolved
    resolved = BudgetLimits(Quantity.parse("50%"), Quantity.parse("25%")).resolve(nodes)

    # Then each zone gets 25% of its own nodes, and a zone without nodes in scope (or unknown) gets 1
    assert resolved.total == 7
    assert resolved.per_zone is not None
    assert resolved.per_zone.by_zone == {"a": 2, "b": 1}
    assert resolved.per_zone.of("c") == 1
    assert resolved.per_zone.of(None) == 1


def test_without_a_per_zone_limit_only_the_total_applies() -> None:
    resolved = BudgetLimits(Quantity.parse("2")).resolve([])
    assert resolved.per_zone is None


def test_the_node_of_a_stopped_instance_is_neither_unavailable_nor_in_scope() -> None:
    # Given 3 nodes in service in zone a, one NotReady for another reason, the NotReady node of an instance
    # stopped into a warm pool (its cordon lifted by the warm-pool watch) and that of one an operator stopped
    # while its drain's cordon stayed
    nodes = [node(f"a{i}") for i in range(3)] + [node("lost", ready=False)]
    nodes += [node("pooled", ready=False, shut_down=True)]
    nodes += [node("stopped", schedulable=False, ready=False, shut_down=True)]

    # When an owner counting unavailable nodes, with percent limits, records its limits
    limits = BudgetLimits(Quantity.parse("50%"), Quantity.parse("50%"))
    entry = owner_limits(limits, count_unavailable=True, nodes=nodes, now=START)

    # Then only the node lost to a disruption is unavailable, and the percents are of the other 4 nodes
    assert entry.unavailable == (NodeRef(name="lost", zone="a"),)
    assert entry.nodes_in_scope == 4
    assert entry.resolved.total == 2
    assert entry.resolved.per_zone is not None
    assert entry.resolved.per_zone.by_zone == {"a": 2}
