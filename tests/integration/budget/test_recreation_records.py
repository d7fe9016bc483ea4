"""The re-creation tests' lifecycle records time out where intake makes an action started at BEGAN time out, on
the budget's clock: records dated by another clock (the engine tests', months later) put every drain's deadline
cap months away, so that a drain which should meet its cap never did and a fault in the cap went unseen."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.drain.common import _deadline_cap
from nodecycle.domain.model import GLOBAL_TIMEOUT_CAP, Step, global_deadline
from tests.integration.budget.recreation import BEGAN, lifecycle_of, record_of, slot_of
from tests.unit.drain.test_drain_steps import policy


def test_the_records_time_out_as_intake_times_out_an_action_started_when_they_began() -> None:
    late = BEGAN + timedelta(minutes=10)
    for record, began in (
        (record_of(slot_of(0), Step.ACQUIRE_SLOT), BEGAN),
        (record_of(slot_of(1), Step.ACQUIRE_SLOT, received_at=late), late),
        (lifecycle_of(slot_of(2), Step.EVICT, seq=3), BEGAN),
    ):
        assert record.started_at == record.received_at == began
        assert record.heartbeat_deadline == began + timedelta(seconds=record.heartbeat_timeout)
        assert record.global_deadline == global_deadline(began, record.heartbeat_timeout)
        assert began < _deadline_cap(record, policy()) < began + GLOBAL_TIMEOUT_CAP
