"""A scheduled maintenance's drain waiting in the budget's line, whose maintenance the customer moves later
(ModifyInstanceEventStartTime: no AWS Health event tells of it) or EC2 calls off or carries out meanwhile (listed
"[Canceled]" or "[Completed]", or no more): its look at EC2 in line takes it out of the line. Kept in line, it
drained the node when its turn came, a slot taken from the nodes that need one: for nothing (called off), or a
needless disruption hours or days before its maintenance whose cordon the watch after it lifted at once, nothing
coming by the old start, and nothing drained the node for the new one (moved later)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest

from nodecycle.domain.drain.common import _full_drain
from nodecycle.domain.engine import advance
from nodecycle.domain.model import EC2, MAINTENANCE_LISTED, SUCCESSOR, WARM_POOL, LifecycleRecord, Step
from nodecycle.domain.policy import MAINTENANCE_LOOK
from nodecycle.domain.ports.cluster import NodeInfo
from tests.support.fakes import T0, InMemoryRecords
from tests.unit.drain.maintenance_asks import ask, listing
from tests.unit.drain.test_drain_steps import (
    NODE,
    OWNER,
    Ec2Maintenance,
    FakeSlots,
    maintenance,
    node,
    policy,
    terminating,
)

LEAD = timedelta(hours=1)  # MaintenanceLeadMinutes' default
STARTS = T0 + LEAD  # the maintenance's start as intake took it in: its drain is due at T0
LOOKS = T0 + MAINTENANCE_LOOK + timedelta(seconds=30)  # the waiter's first ask past a look interval in line


def in_line(
    ec2: Ec2Maintenance, slots: FakeSlots, following: LifecycleRecord | None = None
) -> LifecycleRecord:
    """The maintenance's lifecycle after its first ask at its due time (T0) found no room: in line, its ask
    again due past a look interval; ``following``: the lifecycle queued on its record after it (SUCCESSOR)."""
    extra: dict[str, object] = {MAINTENANCE_LISTED: True}
    if following is not None:
        extra[SUCCESSOR] = following.model_dump(mode="json")
    record = maintenance(
        Step.ACQUIRE_SLOT,
        STARTS,
        started_at=T0 - timedelta(days=14),
        received_at=T0 - timedelta(days=14),
        extra=extra,
    )
    outcome = ask(record, ec2, slots, T0)
    assert outcome.again, outcome
    assert outcome.changes["slot_waiting_since"] == T0
    assert len(slots._document().waiters) == 1
    return advance(record, outcome, T0)


def test_a_waiter_whose_maintenance_was_moved_later_leaves_the_line_until_its_new_lead_time() -> None:
    # Given a reboot's drain waiting in line since its due time, no room in the budget
    slots, ec2 = FakeSlots(room=0), listing(STARTS)
    waiting = in_line(ec2, slots)

    # When the customer moves the reboot three days later, and the waiter looks at EC2 at its next ask
    moved = STARTS + timedelta(days=3)
    outcome = ask(waiting, listing(moved), slots, LOOKS)

    # Then it leaves the line (its place given back, no slot asked for) and waits for the new start's lead time,
    # timed by it, looking at EC2 meanwhile
    assert len(slots.requests) == 1
    assert slots.released == [NODE]
    assert len(slots._document().waiters) == 0
    assert outcome.again
    assert outcome.delay == MAINTENANCE_LOOK.total_seconds()
    after = advance(waiting, outcome, LOOKS)
    assert after.slot_waiting_since is None
    assert (after.global_deadline, after.heartbeat_deadline) == (moved, moved)

    # ...and at the new lead time it asks again, as any drain come due
    again = ask(after, listing(moved), slots, moved - LEAD)
    assert len(slots.requests) == 2
    assert again.changes["slot_waiting_since"] == moved - LEAD


def test_a_waiter_whose_maintenance_was_moved_later_still_due_keeps_its_place() -> None:
    # Given a reboot's drain waiting in line, moved ten minutes later: its drain is still due
    slots, ec2 = FakeSlots(room=0), listing(STARTS)
    waiting = in_line(ec2, slots)
    later = STARTS + timedelta(minutes=10)

    # When the waiter looks at EC2
    outcome = ask(waiting, listing(later), slots, LOOKS)

    # Then it keeps its place in line, timed by the new start, and asks again at once
    assert slots.released == []
    assert len(slots._document().waiters) == 1
    assert (outcome.again, outcome.delay) == (True, 0)
    after = advance(waiting, outcome, LOOKS)
    assert (after.global_deadline, after.slot_waiting_since) == (later, T0)
    ask(after, listing(later), slots, LOOKS)
    assert len(slots.requests) == 2


def test_a_waiter_whose_maintenance_was_called_off_leaves_the_line_and_drains_nothing() -> None:
    # Given a reboot's drain waiting in line
    slots = FakeSlots(room=0)
    waiting = in_line(listing(STARTS), slots)

    # When EC2 calls the reboot off (or carries it out) meanwhile: listed no more as pending
    outcome = ask(waiting, listing(), slots, LOOKS)

    # Then its node is not drained for it: no slot asked for, and its lifecycle goes to its cleanup, which gives
    # its place in line back
    assert len(slots.requests) == 1
    assert outcome.then is Step.CLEANUP
    assert outcome.changes["outcome"] == "maintenance-not-listed"


def test_a_waiter_whose_maintenance_was_called_off_hands_over_to_the_next_one() -> None:
    # Given a reboot's drain waiting in line, and the instance's retirement a week on queued on the record
    slots = FakeSlots(room=0)
    following = maintenance(Step.ACQUIRE_SLOT, STARTS + timedelta(days=7))
    waiting = in_line(listing(STARTS, STARTS + timedelta(days=7)), slots, following)

    # When the reboot is called off, EC2 listing only the retirement
    outcome = ask(waiting, listing(STARTS + timedelta(days=7)), slots, LOOKS)

    # Then the reboot's lifecycle ends undrained: the retirement drains in its own time
    assert len(slots.requests) == 1
    assert outcome.then is Step.CLEANUP
    assert outcome.changes["outcome"] == "maintenance-not-listed"


def test_a_waiter_looks_at_ec2_once_per_look_interval() -> None:
    # Given a reboot's drain waiting in line, called off
    slots = FakeSlots(room=0)
    waiting = in_line(listing(STARTS), slots)

    # When it asks again before a look interval has passed in line
    ask(waiting, listing(), slots, T0 + MAINTENANCE_LOOK - timedelta(seconds=30))

    # Then it asks as it waits (EC2 is looked at once per interval: the call is a waiter's, per interval)
    assert len(slots.requests) == 2


def test_a_waiter_with_a_lead_time_of_half_an_hour_looks_at_ec2_before_it_is_forced() -> None:
    # Given a stack draining maintenance half an hour before its start, a drain taking up to about 18 minutes
    # (DrainTimeoutSeconds 600 and its tail): a waiter stands in line from its due time until it is forced past the
    # budget some 12 minutes later
    short = policy(maintenance_lead_minutes="30")
    starts = T0 + timedelta(minutes=30)
    slots = FakeSlots(room=0)
    record = maintenance(
        Step.ACQUIRE_SLOT,
        starts,
        started_at=T0 - timedelta(days=14),
        received_at=T0 - timedelta(days=14),
        extra={MAINTENANCE_LISTED: True},
    )
    waiting = advance(record, ask(record, listing(starts), slots, T0, short), T0)
    assert waiting.slot_waiting_since == T0
    assert starts - _full_drain(short) > T0 + timedelta(minutes=11)  # (when it is forced)

    # When EC2 calls the maintenance off, and the waiter asks eight minutes on, well before it is forced
    now = T0 + timedelta(minutes=8)
    outcome = ask(waiting, listing(), slots, now, short)

    # Then it has looked, and leaves the line undrained: a look once per MAINTENANCE_LOOK (15 minutes) came after
    # it was forced, so never while it stood in line
    assert outcome.then is Step.CLEANUP
    assert outcome.changes["outcome"] == "maintenance-not-listed"
    assert len(slots.requests) == 1


def _terminate(destination: str | None = EC2) -> LifecycleRecord:
    """The group's termination of the instance, taken in while its maintenance waits (its drain begun)."""
    return terminating(
        Step.EVICT,
        global_deadline=T0 + timedelta(hours=2),
        heartbeat_deadline=T0 + timedelta(hours=1),
        destination=destination,
        node=NODE,
        drain_started_at=T0 - timedelta(minutes=1),
    )


def _claimed_by(lifecycle: LifecycleRecord) -> NodeInfo:
    """The node as the lifecycle's cordon leaves it: claimed for it, cordoned."""
    progress = {
        "instance": lifecycle.instance_id,
        "transition": lifecycle.transition.short,
        "token": lifecycle.token,
    }
    # (a new resource version: the waiter's ask reads the node whole again, not as its last ask saw it)
    return node(owner=OWNER, in_progress=json.dumps(progress), unschedulable=True, resource_version="8")


def _released_for(lifecycle: LifecycleRecord) -> NodeInfo:
    """The node as the lifecycle's cleanup leaves it, its instance going: cordoned, released for it."""
    return node(
        owner=None, in_progress=None, released_for=lifecycle.id, unschedulable=True, resource_version="9"
    )


@pytest.mark.parametrize("drained", [_claimed_by, _released_for], ids=["draining", "drained"])
def test_a_maintenance_whose_instance_the_group_terminates_leaves_its_node_to_that_drain(
    drained: Callable[[LifecycleRecord], NodeInfo],
) -> None:
    # Given the group terminating the instance (scaled in) while its reboot's drain waits: the terminate lifecycle
    # drains its node, or drained it and completed its action (the instance goes for good)
    terminate = _terminate()
    records = InMemoryRecords()
    records.create(terminate)
    slots = FakeSlots(room=1)
    waiting = in_line(listing(STARTS), FakeSlots(room=0))

    # When the reboot's drain asks for its slot, EC2 listing the reboot still (a terminating instance runs until its
    # hook completes)
    outcome = ask(waiting, listing(STARTS), slots, LOOKS, found=drained(terminate), records=records)

    # Then it drains nothing of its own: no slot asked for (one granted after the termination's drain was a second
    # drain of the node, a slot taken from the nodes that need one), its lifecycle ends
    assert slots.requests == []
    assert outcome.then is Step.CLEANUP
    assert outcome.changes["outcome"] == "drained-by:terminate"


def test_a_maintenance_whose_instance_goes_to_its_warm_pool_still_drains() -> None:
    # Given the instance scaled in to its warm pool (it stops, and comes back) while its reboot's drain waits
    terminate = _terminate(destination=WARM_POOL)
    records = InMemoryRecords()
    records.create(terminate)
    slots = FakeSlots(room=1)
    waiting = in_line(listing(STARTS), FakeSlots(room=0))

    # When the reboot's drain asks, the pool's drain over
    ask(waiting, listing(STARTS), slots, LOOKS, found=_released_for(terminate), records=records)

    # Then it asks for its slot as before: EC2's listing says whether the stop carried the reboot out
    assert len(slots.requests) == 1


def test_a_waiter_whose_maintenance_ec2_does_not_list_yet_stays_in_line() -> None:
    # Given a reboot AWS Health told of five minutes before its drain came due, which EC2 did not list at intake
    # (its list may lag Health's notice: drained as Health tells it until MAINTENANCE_LISTED_WITHIN has passed), its
    # drain waiting in line since its due time
    slots = FakeSlots(room=0)
    told = T0 - timedelta(minutes=5)
    record = maintenance(Step.ACQUIRE_SLOT, STARTS, started_at=told, received_at=told, extra={})
    first = ask(record, listing(), slots, T0)
    assert first.changes["slot_waiting_since"] == T0
    waiting = advance(record, first, T0)

    # When it looks at EC2 a look interval on, EC2 listing it still not (20 minutes after Health told of it)
    outcome = ask(waiting, listing(), slots, LOOKS)

    # Then it keeps its place and asks as it waits: not settled undrained as a maintenance called off
    assert outcome.then is not Step.CLEANUP, outcome
    assert slots.released == []
    assert len(slots.requests) == 2
