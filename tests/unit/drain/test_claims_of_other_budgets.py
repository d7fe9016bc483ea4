"""A node another stack claims, where that stack writes nothing in this stack's budget (it keeps a budget of its own,
in another BudgetNamespace): the budget's lack of a holder of that stack tells nothing of its drain, which may be
alive. The node is not adopted from under it (invariant 3), unless its claim is older than any drain lives."""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.drain.acquire import CLAIM_OUTLIVED
from nodecycle.domain.drain.common import ADOPT_FROM
from nodecycle.domain.model import Step
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    acquire,
    maintenance,
    node,
    terminating,
)


def _claim(started: object) -> str:
    """Another stack's in-progress annotation, for another lifecycle of the instance (its own hook's action)."""
    return json.dumps(
        {"instance": terminating(Step.ACQUIRE_SLOT).instance_id, "transition": "terminate", "token": "theirs"}
        | ({} if started is None else {"started": str(started)})
    )


def test_a_node_claimed_by_a_stack_that_writes_in_another_budget_is_left_to_it() -> None:
    # Given a node stack-b claimed a minute ago, and this stack's budget, which stack-b writes nothing in
    claimed = node(
        owner="stack-b", in_progress=_claim((T0 - timedelta(minutes=1)).isoformat()), unschedulable=True
    )
    cluster, slots = FakeCluster(nodes={NODE: claimed}), FakeSlots()
    step = acquire(cluster, slots)

    # When this stack's lifecycle of the node asks for its slot
    waiting = step(terminating(Step.ACQUIRE_SLOT), T0)

    # Then it takes none and waits, as for a node another stack holds in this budget; after its own drain timeout
    # it settles its own action, the node never touched
    assert waiting.again
    assert ADOPT_FROM not in waiting.changes.get("extra", {})
    assert slots.holders == set()
    done = step(terminating(Step.ACQUIRE_SLOT), T0 + timedelta(seconds=601))
    assert (done.then, done.changes["outcome"]) == (Step.COMPLETE, "node-owned-by:stack-b")
    assert slots.holders == set()
    assert cluster.patches == []


def test_a_claim_that_tells_no_start_is_left_to_its_stack_too() -> None:
    # Given stack-b's claim without a readable start (edited by hand), and stack-b writing nothing in this budget
    cluster = FakeCluster(
        nodes={NODE: node(owner="stack-b", in_progress=_claim("yesterday"), unschedulable=True)}
    )
    slots = FakeSlots()

    # When this stack asks, Then it takes no slot: its claim may be a drain in progress
    assert acquire(cluster, slots)(terminating(Step.ACQUIRE_SLOT), T0).again
    assert slots.holders == set()


def test_a_claim_older_than_any_drain_is_adopted_whatever_budget_its_stack_writes() -> None:
    # Given stack-b's claim begun longer ago than any drain lives (stack-b removed, its annotations left)
    started = (T0 - CLAIM_OUTLIVED).isoformat()
    cluster = FakeCluster(
        nodes={NODE: node(owner="stack-b", in_progress=_claim(started), unschedulable=True)}
    )
    slots = FakeSlots()

    # When this stack's lifecycle of the node asks for its slot
    taken = acquire(cluster, slots)(terminating(Step.ACQUIRE_SLOT), T0)

    # Then it takes the slot and adopts the node
    assert (taken.then, taken.again) == (None, False)
    assert taken.changes["extra"][ADOPT_FROM] == "stack-b"
    assert slots.holders == {NODE}


def test_a_claim_left_alone_is_told_once_on_its_node_with_the_deadline_and_how_to_clear_it() -> None:
    # Given a node stack-b claimed a minute ago, stack-b writing nothing in this budget (a stack of another
    # BudgetNamespace, or one removed more than a day ago: this stack cannot tell which)
    started = (T0 - timedelta(minutes=1)).isoformat()
    cluster = FakeCluster(
        nodes={NODE: node(owner="stack-b", in_progress=_claim(started), unschedulable=True)}
    )
    events = FakeEvents()
    step = acquire(cluster, FakeSlots(), events=events)

    # When this stack's lifecycle of the node asks for its slot, and again at its retry
    waiting = step(terminating(Step.ACQUIRE_SLOT), T0)
    again = step(terminating(Step.ACQUIRE_SLOT, extra=waiting.changes["extra"]), T0 + timedelta(seconds=30))

    # Then a warning on the node says once whose claim keeps it, since when, that the action is completed undrained
    # at this stack's drain timeout, and how to clear a claim whose stack is gone
    assert again.again
    assert events.written == [(NODE, "NodeClaimedElsewhere", "Warning")]
    message = events.messages[0]
    assert "stack-b" in message
    assert started in message
    assert (T0 + timedelta(seconds=600)).isoformat() in message
    assert f"kubectl annotate node {NODE} nodecycle.io/owner- nodecycle.io/in-progress-" in message


def test_an_action_completed_with_its_node_left_to_another_budgets_claim_is_counted_for_the_alarm() -> None:
    # Given a node stack-b claimed a minute ago, stack-b writing nothing in this budget
    started = (T0 - timedelta(minutes=1)).isoformat()
    cluster = FakeCluster(
        nodes={NODE: node(owner="stack-b", in_progress=_claim(started), unschedulable=True)}
    )
    metrics = FakeMetrics()
    step = acquire(cluster, FakeSlots(), metrics)

    # When this stack's lifecycle waits on it, then gives up at its drain timeout
    waiting = step(terminating(Step.ACQUIRE_SLOT), T0)
    assert "NodesClaimedElsewhere" not in metrics.counts  # (waiting is not yet a node left undrained)
    extra = waiting.changes["extra"]
    done = step(terminating(Step.ACQUIRE_SLOT, extra=extra), T0 + timedelta(seconds=601))

    # Then the action completed with its node undrained pages, as a drain timeout does: the event on the node is
    # read by whoever looks at the node, the metric by the alarm
    assert done.changes["outcome"] == "node-owned-by:stack-b"
    assert metrics.counts["NodesClaimedElsewhere"] == 1


def test_a_maintenance_drain_of_a_node_another_budget_claims_waits_and_tells_it_from_its_due_time() -> None:
    # Given a scheduled maintenance told a week before its start (Health's notice), due to drain an hour before it,
    # and its node claimed a minute ago by stack-b, which writes nothing in this budget
    starts = T0 + timedelta(days=7)
    due = starts - timedelta(hours=1)
    claimed = (due - timedelta(minutes=1)).isoformat()
    cluster = FakeCluster(
        nodes={NODE: node(owner="stack-b", in_progress=_claim(claimed), unschedulable=True)}
    )
    events, metrics = FakeEvents(), FakeMetrics()
    step = acquire(cluster, FakeSlots(), metrics, events)

    # When its drain first asks for its slot, at its due time
    waiting = step(maintenance(Step.ACQUIRE_SLOT, starts), due)

    # Then it waits for the claim as a hook's drain does (the drain's time begins at its due time, not at the
    # notice a week before), told once on the node with a time to give up that is still ahead
    assert waiting.again, waiting
    assert events.written == [(NODE, "NodeClaimedElsewhere", "Warning")]
    assert (due + timedelta(seconds=600)).isoformat() in events.messages[0]
    assert "NodesClaimedElsewhere" not in metrics.counts
    # and gives up (counted) once its drain timeout from then is over
    extra = waiting.changes["extra"]
    done = step(maintenance(Step.ACQUIRE_SLOT, starts, extra=extra), due + timedelta(seconds=601))
    assert done.changes["outcome"] == "node-owned-by:stack-b"
    assert metrics.counts["NodesClaimedElsewhere"] == 1
