"""A node kept out of a full line (QUEUE_FULL) once its action's global timeout made it urgent: the line full of
waiters it may not displace (drains in progress, or other urgent nodes), it stays outside until it is forced. It
asked again every second meanwhile (its retry capped by a moment already past), each ask a read and a write of the
whole budget document (up to 900 KiB); a scale-in longer than the actions' global timeouts has hundreds such."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.drain.common import _full_drain
from nodecycle.domain.model import Step
from tests.support.fakes import FakeClock, FakeMetrics
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    acquire,
    node,
    policy,
    terminating,
)
from tests.unit.drain.test_kept_out_of_a_full_line import HOLDING, LINE


def test_an_urgent_node_kept_out_of_a_full_line_asks_no_more_often_than_the_budgets_retry() -> None:
    # Given a node whose action is near its global timeout (urgent, not yet forced), and a full line of drains in
    # progress, which it may not displace
    record = terminating(Step.ACQUIRE_SLOT)
    full = _full_drain(policy())
    at = record.global_deadline - 2 * full + timedelta(seconds=30)
    slots = FakeSlots(room=1, holders={HOLDING}, waiters=LINE, clock=FakeClock(at))
    doc = slots._document()
    slots._written(
        doc.model_copy(
            update={"waiters": tuple(w.model_copy(update={"in_progress": True}) for w in doc.waiters)}
        )
    )

    # When it asks
    outcome = acquire(FakeCluster(nodes={NODE: node()}), slots, FakeMetrics(), FakeEvents())(record, at)

    # Then it is kept out (the test's premise), and asks again no sooner than BudgetRetrySeconds, as any waiter
    assert outcome.again
    assert record.id not in slots.waiting
    assert outcome.delay >= policy().budget_retry_seconds
