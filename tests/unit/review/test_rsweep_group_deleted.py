"""A group deleted while the sweeper sweeps it (DeleteAutoScalingGroup with ForceDelete: its instances terminated at
once, its hooks not consulted, its actions ended with it). The held instances the sweep listed before the deletion
are probed under no hook (Auto Scaling answers DescribeLifecycleHooks of a group it does not know with a
ValidationError: no hooks), and no orphan is kept alive, adopted or failed on; an open drain of the group, its action
gone, is recorded past it and paged once (LifecycleActionsExpired: its node went undrained), not settled."""

from __future__ import annotations

from nodecycle.domain.model import Step
from tests.unit.foundation.test_engine import PLAN, kept_alive, make_record
from tests.unit.sweeper.test_orphans import GROUP, INTERVAL, World, adopted
from tests.unit.sweeper.test_sweeper import Repair


def test_an_orphans_group_deleted_after_the_listing_showed_it_leaves_nothing_to_keep_alive_or_adopt() -> None:
    # Given an action held with no record, found and kept alive by a sweep (its group's hooks read)
    world = World()
    world.terminating()
    assert world.sweep()["LifecyclesOrphaned"] == 1
    beats = len(world.autoscaling.heartbeats)

    # When its group is deleted after the next sweep's listing showed the instance held: the hooks gone, the action
    # ended with it
    world.autoscaling.hooks = {key: hook for key, hook in world.autoscaling.hooks.items() if key[0] != GROUP}
    world.autoscaling.active = False
    world.clock.advance(INTERVAL.total_seconds())
    report = world.sweep()

    # Then nothing is kept alive, adopted, or failed on
    assert (report["LifecyclesOrphaned"], report["LifecyclesAdopted"]) == (0, 0)
    assert len(world.autoscaling.heartbeats) == beats
    assert adopted(world) is None


def test_an_open_drain_whose_group_was_deleted_is_recorded_past_its_action_and_paged_once() -> None:
    # Given a drain at its eviction, its heartbeat due before the next sweep, whose group was deleted since
    repair = Repair()
    repair.autoscaling.action_timeout = 600
    record = make_record(PLAN, Step.EVICT, node="n1", heartbeat_timeout=600)
    repair.clock.current = record.started_at + INTERVAL
    assert repair.records.create(kept_alive(repair.autoscaling, record, record.started_at))
    repair.autoscaling.active = False  # (RecordLifecycleActionHeartbeat: a ValidationError, no active action)

    # When two sweeps run
    repair.run()
    repair.clock.current += INTERVAL
    repair.run()

    # Then it is past its action, paged once, and no completion was asked for it
    moved = repair.records.get(record.id)
    assert moved is not None
    assert moved.outcome == "action-expired"
    assert repair.metrics.counts["LifecycleActionsExpired"] == 1
    assert repair.autoscaling.completed == []
