"""A scheduled maintenance that EC2 lists at a later start when its drain comes due (moved by a customer's
ModifyInstanceEventStartTime, of which no AWS Health event tells) is drained a lead time before its new start, not
before its old one: drained early, the watch after the drain found nothing coming by the old start and lifted the
cordon at once, and nothing drained the node for the new one. One EC2 lists earlier (moved earlier while the lifecycle
waited, which no Health event tells of either) is found by the lifecycle's looks before its drain is due, and drained a
lead time before its new start: asleep until the old start's drain time, the lifecycle met it after it struck."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.engine import advance
from nodecycle.domain.model import MAINTENANCE_LISTED, SUCCESSOR, LifecycleRecord, Step
from nodecycle.domain.policy import MAINTENANCE_LOOK
from tests.support.fakes import T0
from tests.unit.drain.maintenance_asks import FailingEc2, ask, listing
from tests.unit.drain.test_drain_steps import (
    FakeSlots,
    maintenance,
)

LEAD = timedelta(hours=1)  # MaintenanceLeadMinutes' default
STARTS = T0 + LEAD  # the maintenance's start as intake took it in: its drain is due now (T0)
MOVED = STARTS + timedelta(days=3)  # where the reboot was moved to
TOLD = T0 - timedelta(days=14)


def due(starts: datetime = STARTS, **changes: object) -> LifecycleRecord:
    """The maintenance's lifecycle at its first ask, taken in when Health told of it, EC2 listing it then."""
    return maintenance(
        Step.ACQUIRE_SLOT,
        starts,
        started_at=TOLD,
        received_at=TOLD,
        extra={MAINTENANCE_LISTED: True},
        **changes,
    )


def test_a_maintenance_moved_later_is_drained_for_a_lead_time_before_its_new_start() -> None:
    # Given a reboot taken in two weeks ago for STARTS, which EC2 now lists three days later (moved: no Health
    # event tells of that)
    ec2, slots = listing(MOVED), FakeSlots()

    # When its drain comes due for the old start
    record = due()
    outcome = ask(record, ec2, slots)

    # Then no slot is asked for now: the lifecycle waits for the new start's lead time, timed by the new start, and
    # looks at EC2 again meanwhile (a move earlier is told by no Health event either)
    assert slots.requests == []
    assert outcome.again
    assert outcome.delay == MAINTENANCE_LOOK.total_seconds()
    moved = advance(record, outcome, T0)
    assert (moved.global_deadline, moved.heartbeat_deadline) == (MOVED, MOVED)
    looked = ask(moved, ec2, slots, T0 + MAINTENANCE_LOOK)
    assert slots.requests == []
    assert looked.delay == MAINTENANCE_LOOK.total_seconds()

    # ...and at the new start's lead time, EC2 listing it there still, its node is drained
    again = ask(moved, ec2, slots, MOVED - LEAD)
    assert len(slots.requests) == 1
    assert (again.then, again.again) == (None, False)


def test_a_maintenance_ec2_lists_at_its_start_is_drained_for_now() -> None:
    slots = FakeSlots()
    ask(due(), listing(STARTS), slots)
    assert len(slots.requests) == 1


def test_a_maintenance_ec2_lists_before_its_start_is_timed_by_it_and_drained_for_now() -> None:
    # Given a reboot whose drain is due, which EC2 lists five minutes earlier (moved earlier)
    earlier, slots = STARTS - timedelta(minutes=5), FakeSlots()

    # When its drain comes due
    record = due()
    outcome = ask(record, listing(earlier, MOVED), slots)

    # Then the lifecycle is timed by the earlier start, and its first ask runs again at once under it...
    assert slots.requests == []
    assert (outcome.again, outcome.delay) == (True, 0)
    timed = advance(record, outcome, T0)
    assert (timed.global_deadline, timed.heartbeat_deadline) == (earlier, earlier)

    # ...which drains the node
    ask(timed, listing(earlier, MOVED), slots)
    assert len(slots.requests) == 1


def test_a_maintenance_moved_earlier_while_its_lifecycle_waits_is_drained_a_lead_time_before_its_new_start() -> (
    None
):
    # Given a reboot three days away taken in now (its first look at EC2 due MAINTENANCE_LOOK on), which the
    # customer moves to two hours from then (no Health event tells of that)
    record = due(MOVED, due_at=T0 + MAINTENANCE_LOOK)
    earlier = T0 + timedelta(hours=2)
    ec2, slots = listing(earlier), FakeSlots()

    # When the lifecycle looks
    outcome = ask(record, ec2, slots, T0 + MAINTENANCE_LOOK)

    # Then it is timed by the new start, and waits for its lead time (looking again meanwhile), asking no slot
    assert slots.requests == []
    timed = advance(record, outcome, T0 + MAINTENANCE_LOOK)
    assert (timed.global_deadline, timed.heartbeat_deadline) == (earlier, earlier)
    assert outcome.delay == MAINTENANCE_LOOK.total_seconds()

    # ...and is drained at the lead time before it
    ask(timed, ec2, slots, earlier - LEAD)
    assert len(slots.requests) == 1


def test_a_look_before_the_drain_is_due_asks_no_slot_whatever_ec2_answers() -> None:
    # Given a reboot three days away, looked at before its drain is due
    record = due(MOVED)
    for ec2 in (listing(MOVED), FailingEc2()):
        slots = FakeSlots()

        # When EC2 lists it where it was, or does not answer
        outcome = ask(record, ec2, slots)

        # Then it waits for its next look, not past its drain's due time
        assert slots.requests == []
        assert (outcome.again, outcome.delay) == (True, MAINTENANCE_LOOK.total_seconds())
        assert "global_deadline" not in outcome.changes


def test_a_maintenance_called_off_hands_over_to_the_next_one_ec2_lists() -> None:
    # Given a reboot called off, and the instance's retirement a week on, which EC2 lists, queued on the record as
    # the lifecycle that follows this one
    following = due(STARTS + timedelta(days=7))
    record = due()
    record = record.model_copy(
        update={"extra": {**record.extra, SUCCESSOR: following.model_dump(mode="json")}}
    )
    slots = FakeSlots()

    # When the reboot's drain comes due
    outcome = ask(record, listing(STARTS + timedelta(days=7)), slots)

    # Then its node is not drained for it: the lifecycle ends, and the next one drains in its own time
    assert slots.requests == []
    assert outcome.then is Step.CLEANUP
    assert outcome.changes["outcome"] == "maintenance-not-listed"
