"""A scheduled maintenance whose lifecycle already waits in the budget's line when the customer moves it earlier
(ModifyInstanceEventStartTime: to any start at least 60 minutes ahead, up to its deadline; EC2 User Guide,
"Reschedule a scheduled event"; no AWS Health event tells of it). With a lead time longer than an hour the new start
can come well before the old one while the lifecycle waits: asked under the old start, its place near the action's
end (urgent, then forced past the budget) came too late, and the maintenance struck a node still full. The waiter
looks at EC2's listing again, no more often than a maintenance's looks before its drain is due."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.engine import Outcome, advance
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.policy import maintenance_look
from nodecycle.domain.ports.instances import ScheduledEvent
from tests.support.fakes import T0
from tests.unit.drain.maintenance_asks import CountingEc2
from tests.unit.drain.maintenance_asks import ask as ask_for_a_slot
from tests.unit.drain.test_drain_steps import (
    Ec2Maintenance,
    FakeSlots,
    policy,
)
from tests.unit.drain.test_maintenance_moved_later import TOLD, due

LEAD = timedelta(hours=3)  # MaintenanceLeadMinutes 180
STARTS = T0 + LEAD  # its drain is due at T0


def ask(record: LifecycleRecord, ec2: Ec2Maintenance, slots: FakeSlots, now: datetime) -> Outcome:
    """The lifecycle's ask under a three-hour lead time."""
    return ask_for_a_slot(
        record, ec2, slots, now, policy(maintenance_lead_minutes=str(int(LEAD.total_seconds() // 60)))
    )


def test_a_maintenance_moved_earlier_while_it_waits_in_line_asks_under_its_new_start() -> None:
    # Given a reboot due for its drain now, three hours before its start, whose node finds the budget full: it
    # waits in line
    ec2 = CountingEc2(events=[ScheduledEvent(code="system-reboot", not_before=STARTS)])
    slots = FakeSlots(room=1, holders=["other-node"])
    record = due(STARTS)
    outcome = ask(record, ec2, slots, T0)
    record = advance(record, outcome, T0)
    assert record.slot_waiting_since == T0
    asked = len(slots.requests)

    # When it asks again before a look's interval is over, Then EC2 is not asked again (a waiter asks every
    # BudgetRetrySeconds)
    looked = ec2.calls
    record = advance(record, ask(record, ec2, slots, T0 + timedelta(seconds=30)), T0 + timedelta(seconds=30))
    assert ec2.calls == looked

    # When the customer moves the reboot to an hour from twenty minutes on, and the waiter asks again after that
    now = T0 + timedelta(minutes=20)
    earlier = now + timedelta(hours=1)
    ec2.events = [ScheduledEvent(code="system-reboot", not_before=earlier)]
    for _ in range(2):  # (at most one run to take the new start in, then its ask)
        if len(slots.requests) > asked + 1:
            break
        record = advance(record, ask(record, ec2, slots, now), now)

    # Then it is timed by the new start and still in line from where it was, and its ask's precedence near the
    # action's end is reckoned from the new start (before: from the old one, two hours late)
    assert (record.global_deadline, record.heartbeat_deadline) == (earlier, earlier)
    assert record.slot_waiting_since == T0
    request = slots.requests[-1]
    assert request.urgent_at is not None
    assert request.urgent_at <= earlier - 2 * policy().timeout
    assert maintenance_look(LEAD) < now - T0
    assert record.started_at == TOLD
