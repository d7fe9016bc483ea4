"""A node kept out of the budget's line because it is full (QUEUE_FULL: MAX_WAITERS waiting, or the document at its
size): it has no place in line, asks again from outside, and was neither told on its node nor counted as waiting
(``slot_waiting_since``). Its action's timeout holds all the same (near it the node is let in past the bounds, then
forced). Its asks read the whole document (up to 900 KiB) every BudgetRetrySeconds, more often than the last of the
2,000 waiters inside it ask. First come, first served holds for it all the same: its asks carry since when it
waits, so when a place frees it goes before a node that came after it (the last test)."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.budget.rules import MAX_WAITERS
from nodecycle.domain.drain.acquire import RETRY_IN_LINE_FACTOR
from nodecycle.domain.drain.common import _full_drain
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
from tests.support.fakes import T0, FakeClock, FakeMetrics
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    acquire,
    node,
    policy,
    terminating,
)

HOLDING = "ip-10-0-3-3.eu-west-1.compute.internal"  # the node that holds the budget's one slot
LINE = [f"i-0line{i:05d}/terminate/t" for i in range(MAX_WAITERS)]
BASE = policy().budget_retry_seconds


def full_line(at: datetime = T0, joined: datetime | None = None) -> FakeSlots:
    """A budget of one slot, held, and MAX_WAITERS of this stack's nodes waiting in line (renewed at ``at``; waiting
    since ``joined``, default ``at``: a node kept out since before takes the place of one that came after it)."""
    slots = FakeSlots(room=1, holders={HOLDING}, waiters=LINE, clock=FakeClock(at))
    if joined is not None:
        slots.store.update(
            lambda doc: (
                None
                if doc is None
                else doc.model_copy(
                    update={
                        "waiters": tuple(w.model_copy(update={"waiting_since": joined}) for w in doc.waiters)
                    }
                ),
                None,
            )
        )
    return slots


def ask(slots: FakeSlots, record: LifecycleRecord, at: datetime, events: FakeEvents) -> Outcome:
    cluster = FakeCluster(nodes={NODE: node()})
    return acquire(cluster, slots, FakeMetrics(), events)(record, at)


def test_a_node_kept_out_of_a_full_line_is_told_counted_as_waiting_and_asks_as_the_last_in_line() -> None:
    # Given a full line
    slots, events = full_line(), FakeEvents()
    record = terminating(Step.ACQUIRE_SLOT)

    # When the node asks, and asks again at its retry
    first = ask(slots, record, T0, events)
    record = record.model_copy(update=dict(first.changes))
    again = ask(slots, record, T0 + timedelta(seconds=first.delay), events)

    # Then it is kept out both times (the test's premise)
    assert slots.requests[-1].node == NODE
    assert record.id not in slots.waiting
    # And it waits since its first ask (its place when room comes, its time waiting), told once on its node that
    # the line is full
    assert first.changes["slot_waiting_since"] == T0
    assert again.changes.get("slot_waiting_since", T0) == T0
    assert [reason for _, reason, _ in events.written] == ["WaitingForDisruptionBudget"]
    assert "queue-full" in events.messages[0], events.messages
    # And it asks no more often than the last of the waiters inside the line (which it stands behind)
    assert (
        first.delay
        == again.delay
        == min(BASE * RETRY_IN_LINE_FACTOR, policy().holder_ttl.total_seconds() / 3)
    )


def test_a_node_kept_out_of_a_full_line_gets_in_near_its_global_timeout_then_is_forced() -> None:
    # Given the node kept out of a full line since its first ask
    record = terminating(Step.ACQUIRE_SLOT)
    full = _full_drain(policy())
    urgent_at, forced_at = record.global_deadline - 2 * full, record.global_deadline - full
    events = FakeEvents()
    kept_out = ask(full_line(), record, T0, events)
    record = record.model_copy(update=dict(kept_out.changes))

    # When it asks just before its action's global timeout makes it urgent, it is still kept out, but asks again by
    # then; when it is urgent, it is let into the line (taking the youngest waiter's place); then forced
    late = urgent_at - timedelta(seconds=5)
    before = ask(
        full_line(late, joined=T0), record, late, events
    )  # (the line came first: it is kept out still)
    assert before.again
    assert late + timedelta(seconds=before.delay) <= urgent_at + timedelta(seconds=1)
    slots = full_line(urgent_at)
    inside = ask(slots, record, urgent_at, events)
    assert inside.again
    assert record.id in slots.waiting
    # (the line as full again then: every waiter and the holder renewed since)
    slots = full_line(forced_at)
    forced = ask(slots, record.model_copy(update=dict(inside.changes)), forced_at, events)
    assert (forced.then, forced.again) == (None, False)
    assert NODE in slots.holders
    assert len(slots.holders) == 2


def test_a_node_kept_out_of_a_full_line_goes_before_a_node_that_came_after_it() -> None:
    # Given a node kept out of a full line at T0
    slots, events = full_line(), FakeEvents()
    record = terminating(Step.ACQUIRE_SLOT)
    kept_out = ask(slots, record, T0, events)
    record = record.model_copy(update=dict(kept_out.changes))
    # When a place frees (the first waiter leaves), a node that came after it asks first, then it asks again
    slots.budget.release(slots._document().waiters[0].node, LINE[0])
    slots.clock.advance(10)  # (the budget's clock: the newcomer comes 10 s after it)
    newcomer = terminating(Step.ACQUIRE_SLOT, id="i-0newcomer/terminate/t", instance_id="i-0newcomer")
    other = FakeCluster(nodes={"ip-10-0-5-5": node(name="ip-10-0-5-5", instance_id="i-0newcomer")})
    acquire(other, slots)(newcomer.model_copy(update={"node": "ip-10-0-5-5"}), T0 + timedelta(seconds=10))
    slots.clock.advance(kept_out.delay - 10)
    ask(slots, record, T0 + timedelta(seconds=kept_out.delay), events)

    # Then it waits in line, before the node that came after it
    line = slots.waiting
    assert record.id in line
    assert newcomer.id not in line or line.index(record.id) < line.index(newcomer.id)
    assert INSTANCE in record.id
