"""A scheduled maintenance's drain looks at EC2's listing before its first ask: a maintenance called off since
intake took it in (or one EC2 never lists as the instance's) empties no node and takes no slot."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodecycle.domain.drain.acquire import MAINTENANCE_LISTED_WITHIN
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import KEPT_ON_NODE, MAINTENANCE_LISTED, LifecycleRecord, Step
from nodecycle.domain.ports.instances import ScheduledEvent
from tests.support.fakes import T0
from tests.unit.drain.maintenance_asks import CountingEc2, FailingEc2, ask
from tests.unit.drain.test_drain_steps import (
    NODE,
    Ec2Maintenance,
    FakeSlots,
    maintenance,
)

STARTS = T0 + timedelta(
    hours=1
)  # the maintenance's start: its drain is due now (T0), an hour's lead before it
TOLD = T0 - timedelta(days=14)  # AWS Health's first notice of it, two weeks ahead
LISTED = [ScheduledEvent(code="system-reboot", not_before=STARTS, not_after=STARTS + timedelta(hours=2))]


def due(listed_at_intake: bool = True, told: datetime = TOLD, **changes: object) -> LifecycleRecord:
    """The maintenance's lifecycle at its first ask, due now: taken in when Health told of it (``told``), EC2
    listing it then or not."""
    extra = {MAINTENANCE_LISTED: True} if listed_at_intake else {}
    return maintenance(Step.ACQUIRE_SLOT, STARTS, started_at=told, received_at=told, extra=extra, **changes)


def test_a_maintenance_called_off_after_intake_is_not_drained_for() -> None:
    # Given a reboot EC2 listed when AWS Health told of it two weeks ago, called off since: EC2 lists it
    # "[Canceled]" (which is no pending event), and Health's update of it, closed, was acknowledged with nothing
    # to do
    slots = FakeSlots()

    # When its drain comes due, an hour before the start it had
    outcome = ask(due(), Ec2Maintenance(), slots)

    # Then no slot is asked for and the node is not drained: the lifecycle ends, saying why
    assert slots.requests == []
    assert outcome.then is Step.CLEANUP
    assert outcome.changes["outcome"] == "maintenance-not-listed"
    assert "node" not in outcome.changes


def test_a_maintenance_ec2_still_lists_is_drained_for() -> None:
    # Given the same reboot, which EC2 still lists
    slots = FakeSlots()

    # When its drain comes due
    outcome = ask(due(), Ec2Maintenance(events=list(LISTED)), slots)

    # Then its node takes a slot and goes on to its cordon
    (asked,) = slots.requests
    assert asked.node == NODE
    assert (outcome.then, outcome.again) == (None, False)


def test_a_maintenance_ec2_never_listed_is_not_drained_for_once_ec2_had_time_to_list_it() -> None:
    # Given a Health scheduled change EC2 did not list at intake, two weeks ago, and does not list now: no
    # scheduled event of the instance's (a type EC2 never lists), or one called off before EC2 listed it
    slots = FakeSlots()

    outcome = ask(due(listed_at_intake=False), Ec2Maintenance(), slots)

    # Then it is not drained for
    assert slots.requests == []
    assert outcome.changes["outcome"] == "maintenance-not-listed"


def test_a_maintenance_told_moments_ago_is_drained_for_before_ec2_lists_it() -> None:
    # Given a maintenance AWS Health told of just now, within the lead time (its drain due at once), which EC2
    # does not list yet: its list may lag Health's notice
    ec2 = CountingEc2()
    slots = FakeSlots()
    told = T0 - MAINTENANCE_LISTED_WITHIN + timedelta(seconds=1)

    ask(due(listed_at_intake=False, told=told), ec2, slots)

    # Then it is drained for, without a look at EC2 (which could not tell it from one called off)
    assert len(slots.requests) == 1
    assert ec2.calls == 0


@pytest.mark.parametrize(
    "error",
    [TransientError("Throttling"), AccessRefused("describing", "UnauthorizedOperation", "")],
    ids=["throttled", "refused"],
)
def test_a_maintenance_is_drained_for_when_ec2_does_not_answer(error: TransientError) -> None:
    # Given EC2 failing DescribeInstanceStatus at the drain's first ask
    slots = FakeSlots()

    ask(due(), FailingEc2(error), slots)

    # Then the drain is not held back for the look: the node takes its slot
    assert len(slots.requests) == 1


def test_only_the_first_ask_looks_at_ec2() -> None:
    # Given a maintenance's drain waiting in line (its first ask made) and one that took over a cordon the
    # lifecycle before it on the record kept (its cleanup lifts it once its maintenance is over)
    waiting = due(slot_waiting_since=T0 - timedelta(minutes=1))
    taken_over = due()
    taken_over = taken_over.model_copy(
        update={"extra": {**taken_over.extra, KEPT_ON_NODE: {"cordon": True, "lb": False}}}
    )
    for record in (waiting, taken_over):
        ec2, slots = CountingEc2(), FakeSlots()

        # When it asks, EC2 listing nothing
        ask(record, ec2, slots)

        # Then it asks for its slot as before, and EC2 is not asked
        assert ec2.calls == 0
        assert len(slots.requests) == 1
