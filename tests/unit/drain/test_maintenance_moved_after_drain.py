"""A scheduled maintenance moved later once its node is drained for it (a customer's ModifyInstanceEventStartTime, of
which no AWS Health event tells: only EC2's listing moves) is drained for again before its new start: the watch
after the drain took the old start's passing with nothing listed by it for the maintenance's end, lifted the cordon,
and nothing drained the node for the new start."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.engine import _successor_of, advance
from nodecycle.domain.model import (
    DONE_STARTS,
    KEPT_ON_NODE,
    MAINTENANCE_LISTED,
    LifecycleRecord,
    Step,
)
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    REBOOT_AT,
    Ec2Maintenance,
    FakeAutoscaling,
    FakeEvents,
    FakeSlots,
    cordoned_for_maintenance,
    drained_for,
    reboot,
    wakes_to_nowhere,
)
from tests.unit.drain.test_drain_steps import FakeCluster as Cluster

LEAD = timedelta(hours=1)


def watch(cluster: Cluster, ec2: Ec2Maintenance, events: FakeEvents) -> Cleanup:
    return Cleanup(
        cluster=cluster,
        slots=FakeSlots(holders={NODE}),
        dispatcher=wakes_to_nowhere(),
        autoscaling=FakeAutoscaling(states={INSTANCE: "InService"}),
        metrics=FakeMetrics(),
        events=events,
        instances=ec2,
        maintenance_lead=LEAD,
    )


def watching_until(
    moved: datetime, now: datetime
) -> tuple[Cluster, FakeEvents, LifecycleRecord, LifecycleRecord]:
    """A node drained for a reboot at REBOOT_AT, its cleanup watching, and the reboot moved to ``moved`` (EC2 lists
    it there only) by ``now``: the cluster, its events, the record as the watch's look leaves it, and the lifecycle
    that follows it on the record."""
    cluster, events = cordoned_for_maintenance(), FakeEvents()
    ec2 = Ec2Maintenance(known={INSTANCE: "running"}, events=[reboot()])
    step = watch(cluster, ec2, events)
    record = drained_for(REBOOT_AT)
    first = step(record, T0 + timedelta(minutes=1))
    assert first.again  # (kept until the window opens)
    assert cluster.cordoned == {NODE}
    watching = advance(record, first, T0 + timedelta(minutes=1))

    ec2.events = [reboot(at=moved)]
    looked = step(watching, now)
    assert (looked.then, looked.again) == (None, False)
    done = advance(watching, looked, now)
    return cluster, events, done, _successor_of(done, now)


def test_a_reboot_moved_days_later_is_drained_again_for_its_new_start_the_cordon_lifted_meanwhile() -> None:
    # Given a node drained for a reboot, which the customer moves three days on
    moved = REBOOT_AT + timedelta(days=3)

    # When the watch looks as the old window opens
    cluster, events, done, following = watching_until(moved, REBOOT_AT)

    # Then the node serves meanwhile (the cordon this lifecycle set lifted, its mark removed, told)...
    assert (cluster.cordoned, cluster.nodes[NODE].released_for) == (set(), None)
    assert (NODE, "UncordonedUntilMaintenance", "Normal") in events.written
    # ...and a lifecycle for the new start follows on the record: due a lead time before it, timed by it, EC2
    # listing it, under a token of its own, with no cordon to take over
    assert following.step is Step.ACQUIRE_SLOT
    assert following.seq == done.seq
    assert (following.due_at, following.global_deadline, following.heartbeat_deadline) == (
        moved - LEAD,
        moved,
        moved,
    )
    assert following.drain_started_at is None
    assert following.extra[MAINTENANCE_LISTED] is True
    assert following.extra[DONE_STARTS] == [REBOOT_AT.isoformat()]
    assert KEPT_ON_NODE not in following.extra
    assert following.token != done.token


def test_a_reboot_moved_within_the_lead_time_keeps_its_cordon_for_the_lifecycle_that_drains_for_it_at_once() -> (
    None
):
    # Given a node drained for a reboot, which the customer moves 20 minutes on (within the lead time)
    moved = REBOOT_AT + timedelta(minutes=20)

    # When the watch looks as the old window opens
    cluster, events, _, following = watching_until(moved, REBOOT_AT)

    # Then the node stays cordoned and empty, taken over by the lifecycle for the new start, due now
    assert cluster.cordoned == {NODE}
    assert (following.due_at, following.global_deadline) == (REBOOT_AT, moved)
    assert following.extra[KEPT_ON_NODE] == {"cordon": True, "lb": False}
    assert not any(reason == "UncordonedAfterMaintenance" for _, reason, _ in events.written)


def test_a_reboot_over_with_a_later_one_listed_is_still_told_apart_from_a_move_by_its_successor() -> None:
    # Given a node drained for a reboot whose lifecycle has the instance's next maintenance queued after it
    cluster, events = cordoned_for_maintenance(), FakeEvents()
    later = REBOOT_AT + timedelta(days=10)
    ec2 = Ec2Maintenance(known={INSTANCE: "running"}, events=[reboot(at=later)])
    following = drained_for(later).model_copy(update={"step": Step.ACQUIRE_SLOT, "token": "retirement"})
    record = drained_for(REBOOT_AT, successor=following.model_dump(mode="json"))

    # When the watch looks once the reboot is over
    done = watch(cluster, ec2, events)(record, REBOOT_AT + timedelta(minutes=30))

    # Then the queued lifecycle follows, as before: no second lifecycle is made up for it
    assert (done.then, done.again) == (None, False)
    assert "extra" not in done.changes
    assert cluster.cordoned == {NODE}
