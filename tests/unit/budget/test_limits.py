from __future__ import annotations

from operator import itemgetter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nodecycle.domain.budget import BudgetDocument, BudgetLimits, Holder, NodeState, Waiter
from nodecycle.domain.budget.document import NodeRef, Released
from nodecycle.domain.budget.limits import Decisive, decisive_unavailable, owner_limits
from nodecycle.domain.budget.rules import _replay, eligible_waiters, leaving
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


def test_a_node_marked_released_by_its_drain_is_neither_unavailable_nor_in_scope() -> None:
    # Given 3 nodes in service in zone a, one cordoned by hand, and two kept cordoned by their drains' cleanups,
    # marked released for their lifecycles (an instance waiting in a Running warm pool, Ready; one ahead of its
    # scheduled maintenance)
    nodes = [node(f"a{i}") for i in range(3)] + [node("by-hand", schedulable=False)]
    nodes += [node("pooled", schedulable=False, released=True)]
    nodes += [node("maintained", schedulable=False, released=True)]

    # When an owner counting unavailable nodes, with percent limits, records its limits
    limits = BudgetLimits(Quantity.parse("50%"), Quantity.parse("50%"))
    entry = owner_limits(limits, count_unavailable=True, nodes=nodes, now=START)

    # Then only the node cordoned by hand is unavailable (as the budget's own mark of a slot given back excuses a
    # node, for a TTL: a node out of the total takes no slot), and the percents are of the other 4 nodes
    assert entry.unavailable == (NodeRef(name="by-hand", zone="a"),)
    assert entry.nodes_in_scope == 4


# -- the unavailable nodes an owner records ----------------------------------------------------------------

ZONES = ("a", "b", "c", None)


@st.composite
def budgets_with_unavailable_nodes(draw: st.DrawFn) -> tuple[BudgetDocument, dict[str, list[NodeState]]]:
    """Two owners' limits over one pool of nodes, many of them unavailable, and holders, waiters and marks
    of slots given back on some of them (and on nodes out of the pool)."""
    pool = [
        NodeState(f"n{i}", draw(st.sampled_from(ZONES)), schedulable=False, ready=False) for i in range(40)
    ]
    names = st.sampled_from([n.name for n in pool] + [f"x{i}" for i in range(6)])
    zone_of = {n.name: n.zone for n in pool}
    owners = ("blue", "green")
    entries = draw(
        st.lists(
            st.tuples(names, st.sampled_from(owners), st.booleans()), max_size=14, unique_by=itemgetter(0)
        )
    )
    seen = {n: zone_of.get(n, draw(st.sampled_from(ZONES))) for n, _, _ in entries}
    holders = tuple(
        Holder(
            node=n,
            instance_id=f"i-{n}",
            zone=seen[n],
            owner=o,
            record_id=f"r-{n}",
            acquired_at=START,
            renewed_at=START,
            ttl_seconds=600,
        )
        for n, o, held in entries
        if held
    )
    waiters = tuple(
        Waiter(
            node=n,
            instance_id=f"i-{n}",
            zone=seen[n],
            owner=o,
            record_id=f"r-{n}",
            waiting_since=START,
            renewed_at=START,
            ttl_seconds=600,
            passed=draw(st.integers(0, 3)),
        )
        for n, o, held in entries
        if not held
    )
    released = tuple(
        Released(
            node=n,
            owner=draw(st.sampled_from(owners)),
            record_id=draw(st.sampled_from([None, f"r-{n}"])),
            released_at=START,
            ttl_seconds=600,
        )
        for n in draw(st.lists(names, max_size=4, unique=True))
    )
    unavailable = {o: [n for n in pool if draw(st.booleans())] for o in owners}
    limits = {
        o: owner_limits(
            BudgetLimits(
                Quantity(value=draw(st.integers(1, 8))),
                draw(st.sampled_from([None, *(Quantity(value=v) for v in range(1, 5))])),
            ),
            count_unavailable=True,
            nodes=unavailable[o],
            now=START,
        )
        for o in owners
    }
    return BudgetDocument(holders=holders, waiters=waiters, released=released, limits=limits), unavailable


@given(budgets_with_unavailable_nodes())
@settings(max_examples=300, deadline=None)
def test_recording_only_the_decisive_unavailable_nodes_changes_no_decision(
    case: tuple[BudgetDocument, dict[str, list[NodeState]]],
) -> None:
    # Given a budget whose owners record every unavailable node in their scope
    full, unavailable = case
    # When each records only those that can change a decision
    held = {h.node for h in full.holders}
    decisive = Decisive(
        named=held | {w.node for w in full.waiters} | {r.node for r in full.released},
        uncounted=held | leaving(full),
    )
    trimmed = full.model_copy(
        update={
            "limits": {
                owner: entry.model_copy(
                    update={
                        "unavailable": tuple(
                            NodeRef(name=n.name, zone=n.zone)
                            for n in decisive_unavailable(unavailable[owner], entry.resolved, decisive)
                        )
                    }
                )
                for owner, entry in full.limits.items()
            }
        }
    )
    # Then the same waiters go, in the same order, and the replay picks alike at every step
    assert [w.node for w in eligible_waiters(trimmed, START)] == [
        w.node for w in eligible_waiters(full, START)
    ]
    assert [(w.node, [f.node for f in fit]) for w, fit in _replay(trimmed, START)] == [
        (w.node, [f.node for f in fit]) for w, fit in _replay(full, START)
    ]
