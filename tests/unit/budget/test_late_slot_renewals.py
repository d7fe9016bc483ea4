"""A drain's step delivered again after its lifecycle gave its budget slot back (SQS delivers at least once: the
duplicate read the record before the first delivery's commit, and asks the budget after that delivery went on,
completed the action and released the slot). The budget refuses it (``released``), and its commit loses to the
record's newer sequence: no slot was lost, so none is counted or told as lost (``BudgetSlotsLost``, on the
dashboard, is a drain paused because another took its slot: a stalled function, an expired holder)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.budget import SlotReason
from nodecycle.domain.drain.cordon import CORDON_REFUSED
from nodecycle.domain.model import Step
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.builders import pod
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeSlots,
    cordon,
    draining,
    evict,
    node,
    terminating,
)


def test_an_evict_step_delivered_again_after_its_slot_was_given_back_counts_no_lost_slot() -> None:
    # Given a drain at EVICT holding its slot, whose first delivery went on, completed the action and gave the
    # slot back
    slots = FakeSlots(holders={NODE})
    record = draining()
    slots.release(NODE, record.id, record.token)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    metrics = FakeMetrics()

    # When a duplicate delivery of that EVICT step runs (it read the record before that commit)
    outcome = evict(cluster, slots, metrics=metrics)(record, T0 + timedelta(seconds=5))

    # Then the budget refuses it, nothing is evicted, and no slot is counted lost nor the drain paused
    assert slots.budget.renew(slots.requests[-1]).reason is SlotReason.RELEASED
    assert cluster.evictions == []
    assert outcome.again
    assert "drain_paused_at" not in outcome.changes
    assert metrics.counts["BudgetSlotsLost"] == 0


def test_a_cordon_asked_again_after_its_slot_was_given_back_counts_no_lost_slot() -> None:
    # Given a drain whose cordon the API server refused, timed out and cleaned up (its slot given back)
    slots = FakeSlots(holders={NODE})
    record = terminating(Step.CORDON, node=NODE, extra={CORDON_REFUSED: T0.isoformat()})
    slots.release(NODE, record.id, record.token)
    cluster = FakeCluster(nodes={NODE: node()})
    metrics = FakeMetrics()

    # When a duplicate delivery of its cordon runs
    cordon(cluster, slots=slots, metrics=metrics)(record, T0 + timedelta(seconds=5))

    # Then the node is not touched, and no slot is counted lost
    assert cluster.patches == []
    assert metrics.counts["BudgetSlotsLost"] == 0
