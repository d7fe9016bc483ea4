"""What a drain waiting for its slot tells on its node says what the drain is for and what its end does. A drain
for a scheduled maintenance (a reboot: no hook, no action) kept out of a full line was told "for the termination
of" its instance (f6b6692 tells queue-full; 2a0b9e3 mended the cordon's events only), and its timeout "the
lifecycle action ... is completed", where nothing is completed: an operator reading the node's events looks for a
scale-in that never was."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.budget.rules import MAX_WAITERS
from nodecycle.domain.drain.common import _cause, _ended
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
    spot,
    terminating,
)

HOLDING = "ip-10-0-3-3.eu-west-1.compute.internal"


def test_a_maintenance_drain_kept_out_of_a_full_line_is_told_as_a_maintenance() -> None:
    # Given a full line, and the drain of a reboot EC2 does in two days
    slots = FakeSlots(
        room=1, holders={HOLDING}, waiters=[f"i-0line{i:05d}/terminate/t" for i in range(MAX_WAITERS)]
    )
    record = maintenance(Step.ACQUIRE_SLOT, T0 + timedelta(days=2))
    events = FakeEvents()

    # When it asks for its slot and is kept out
    acquire(FakeCluster(nodes={NODE: node()}), slots, FakeMetrics(), events)(record, T0)

    # Then its node is told it waits for the maintenance, not for a termination
    assert [reason for _, reason, _ in events.written] == ["WaitingForDisruptionBudget"]
    assert "termination" not in events.messages[0], events.messages
    assert "maintenance" in events.messages[0], events.messages


def test_a_drain_tells_what_its_end_does_by_its_plan() -> None:
    # A drain with a hook's action completes it; one without (a maintenance, a Spot interruption) completes nothing
    assert _ended(terminating(Step.ACQUIRE_SLOT)).endswith("is completed")
    for record in (maintenance(Step.ACQUIRE_SLOT, T0 + timedelta(days=2)), spot(Step.ACQUIRE_SLOT)):
        assert "completed" not in _ended(record), _ended(record)
    assert "maintenance" in _cause(maintenance(Step.ACQUIRE_SLOT, T0 + timedelta(days=2)))
