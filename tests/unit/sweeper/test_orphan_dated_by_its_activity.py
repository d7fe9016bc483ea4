"""The start an adopted action's global timeout is reckoned from. The sweeper's listings date an orphan only from
what its own container saw: a container that starts cold (Lambda recycles them, a deploy replaces them) finds an
action that earlier sweeps kept alive for hours without adopting it (intake refused the adoption: its table or
queue denied, throttled) as if it had just begun. Auto Scaling reckons the action's global timeout from its true
start, and applies the hook's default result there (an undrained termination) while the lifecycle's guard waits
for a later deadline (invariant 11). The group's scaling activity that holds the instance began no later than the
action: the adoption is dated by it too, at one DescribeScalingActivities per adopted action."""

from __future__ import annotations

from datetime import datetime

import pytest

from nodecycle.domain.catalog import LifecycleHooks
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import global_deadline
from nodecycle.domain.ports.lifecycle import WaitingInstance
from nodecycle.domain.sweep.orphans import OrphanedActions
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.sweeper.test_orphans import ADOPT_AFTER, INTERVAL, World, adopted

HEARTBEAT = 900  # the World's hooks' heartbeat timeout


def cold_start(world: World) -> None:
    """A new sweeper container: what the last one saw of the orphans is gone."""
    world.part = OrphanedActions(
        groups=world.groups(),
        hooks=LifecycleHooks(world.autoscaling, world.clock),
        autoscaling=world.autoscaling,
        intake=world.intake,
        records=world.records,
        metrics=world.metrics,
        adopt_after=ADOPT_AFTER,
    )


def count_activity_reads(world: World) -> list[str]:
    calls: list[str] = []
    read = world.autoscaling.activity_started

    def counted(group: str, instance_id: str, since: datetime) -> datetime | None:
        calls.append(instance_id)
        return read(group, instance_id, since)

    world.autoscaling.activity_started = counted  # type: ignore[method-assign]
    return calls


def test_an_orphan_kept_alive_for_hours_then_found_by_a_cold_container_keeps_its_true_global_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an action held with no record, kept alive for three hours by sweeps whose adoptions intake refused
    # (its table's writes denied until someone fixed the role)
    world = World()
    world.terminating()
    started = world.clock.now()

    def refused(waiting: WaitingInstance, hook: str, since: datetime) -> object:
        raise AccessRefused("putting a lifecycle record", "AccessDeniedException", "not authorized")

    with monkeypatch.context() as patched:
        patched.setattr(world.intake, "adopt", refused)
        for sweep in range(36):
            if sweep == 0:
                world.sweep()  # (found: kept alive, adopted at the next)
            else:
                with pytest.raises(SweepFailed):
                    world.sweep()
            world.clock.advance(INTERVAL.total_seconds())

    # When the fix's deploy brings a cold container, whose sweeps find the action and adopt it
    cold_start(world)
    reads = count_activity_reads(world)
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    assert world.sweep()["LifecyclesAdopted"] == 1

    # Then the lifecycle settles by Auto Scaling's global timeout, reckoned from the action's true start (before:
    # from an interval before the cold container's first sighting, three hours late: Auto Scaling applied the
    # hook's default result while the lifecycle's guard still waited)
    record = adopted(world)
    assert record is not None
    assert record.global_deadline <= global_deadline(started, HEARTBEAT)
    assert record.started_at >= started - 2 * INTERVAL  # (and not far earlier: the activity dates it)
    # ... at one DescribeScalingActivities for the adoption, none for the sweep that only kept it alive
    assert reads == [record.instance_id]


def test_an_orphan_the_group_lists_no_activity_for_is_dated_by_the_listings_as_before() -> None:
    # Given an action held with no record whose group lists no activity naming it (nothing but the listings
    # dates it)
    world = World()
    world.sweep()
    listed_before = world.clock.now()
    world.clock.advance(60)
    world.terminating()
    world.autoscaling.activity_started = lambda group, instance_id, since: None  # type: ignore[method-assign]

    # When two sweeps find it and adopt it
    for _ in range(2):
        world.clock.advance(INTERVAL.total_seconds())
        world.sweep()

    # Then it is dated by the last listing that did not show it
    record = adopted(world)
    assert record is not None
    assert record.started_at <= listed_before


def test_an_orphan_a_cold_container_cannot_date_by_its_activity_is_dated_a_heartbeat_timeout_back() -> None:
    # Given an action held with no record for most of its hook's heartbeat timeout (15 minutes, three sweep
    # intervals) before a cold container's first sweep, whose group's activities cannot be read (throttled)
    world = World()
    world.terminating()
    started = world.clock.now()

    def throttled(group: str, instance_id: str, since: datetime) -> datetime | None:
        raise TransientError("reading when a group began what it does with an instance: Throttling")

    world.autoscaling.activity_started = throttled  # type: ignore[method-assign]
    world.clock.advance(HEARTBEAT - 60)

    # When that container's sweeps find it and adopt it
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    assert world.sweep()["LifecyclesAdopted"] == 1

    # Then its global timeout is reckoned from no later than the action started: nothing kept it alive before
    # (no record, no sweep), so it began within a heartbeat timeout of the first sighting (before: one sweep
    # interval back, ten minutes after it began)
    record = adopted(world)
    assert record is not None
    assert record.started_at <= started


def test_an_orphan_found_after_a_day_of_failed_listings_is_adopted_not_refused_as_expired() -> None:
    # Given a sweep that listed the held instances and found none, then a day of sweeps whose listings failed
    # (DescribeAutoScalingGroups refused until someone fixed the role), and an action of this stack's hook held
    # with no record since just before the listings came back
    world = World()
    world.sweep()

    def refused(names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        raise AccessRefused("listing the instances lifecycle hooks hold", "AccessDenied", "not authorized")

    listing = world.autoscaling.waiting_instances
    world.autoscaling.waiting_instances = refused  # type: ignore[method-assign]
    for _ in range(26 * 12):
        world.clock.advance(INTERVAL.total_seconds())
        with pytest.raises(AccessRefused):
            world.sweep()
    world.autoscaling.waiting_instances = listing  # type: ignore[method-assign]
    world.terminating()
    started = world.clock.now()

    # When the next two sweeps find it and adopt it
    for _ in range(2):
        world.clock.advance(INTERVAL.total_seconds())
        world.sweep()

    # Then its lifecycle starts, dated no later than the action began and no earlier than an action still held
    # can have (its global timeout back): before, it was dated by the last listing a day ago, its global timeout
    # taken for past, and intake refused the adoption as expired at every sweep, until Auto Scaling applied the
    # hook's default result
    record = adopted(world)
    assert record is not None
    assert record.started_at <= started
    assert record.global_deadline >= world.clock.now()
    # ... by the group's activity that holds the instance, which tells: the drain has its time
    assert record.global_deadline == global_deadline(started, HEARTBEAT)


def test_an_orphan_found_after_a_day_of_failed_listings_and_no_activity_is_settled_at_once() -> None:
    # Given the same, and a group that lists no activity naming the instance
    world = World()
    world.autoscaling.activity_started = lambda group, instance_id, since: None  # type: ignore[method-assign]
    world.sweep()

    def refused(names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        raise AccessRefused("listing the instances lifecycle hooks hold", "AccessDenied", "not authorized")

    listing = world.autoscaling.waiting_instances
    world.autoscaling.waiting_instances = refused  # type: ignore[method-assign]
    for _ in range(26 * 12):
        world.clock.advance(INTERVAL.total_seconds())
        with pytest.raises(AccessRefused):
            world.sweep()
    world.autoscaling.waiting_instances = listing  # type: ignore[method-assign]
    world.terminating()
    started = world.clock.now()

    # When the next two sweeps find it and adopt it
    for _ in range(2):
        world.clock.advance(INTERVAL.total_seconds())
        world.sweep()

    # Then it is adopted, dated its hook's global timeout back: no later than it began, settled at once
    record = adopted(world)
    assert record is not None
    assert record.started_at <= started
    assert record.global_deadline == world.clock.now()
