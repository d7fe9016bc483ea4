"""The orphans' keep-alive probes a held instance under the hooks its group had when last read, while Auto Scaling will
not tell them (DescribeLifecycleHooks throttled, denied), and adopts what it so found once they are read again. What it
must never adopt: the action of a hook deleted since (an operator removed it on purpose: its actions are not this
stack's to drain), nor one of a group no longer this stack's (its owner tag taken off or changed), whatever sweep comes
next: one whose hooks read fresh, or one whose listing of the held instances fails (the actions found before are then
kept alive and adopted as found). AWS ends a deleted hook's actions at once ("completed first": DeleteLifecycleHook);
here the action is left active, the harsher reading, so that nothing but the sweep's own judgement keeps it out."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.lifecycle import Hook, WaitingInstance
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.sweeper.test_orphans import ADOPT_AFTER, GROUP, HOOK, INSTANCE, INTERVAL, World, adopted


def _found_orphaned(world: World, tags: dict[str, str] | None = None) -> None:
    """A sweep that read the group's hooks and found ``INSTANCE`` held by ``HOOK`` with no record (first sighting)."""
    world.terminating(INSTANCE, tags=tags)
    world.sweep()
    assert adopted(world) is None  # (first seen: adopted only after ADOPT_AFTER)
    assert INTERVAL > ADOPT_AFTER


def _hooks_unread(world: World) -> None:
    def throttled(group: str) -> dict[str, Hook]:
        raise TransientError("reading a group's lifecycle hooks: Throttling: Rate exceeded")

    world.autoscaling.hooks_of = throttled  # type: ignore[method-assign]


def _listing_fails(world: World) -> None:
    def throttled(names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        raise TransientError("listing the held instances: Throttling: Rate exceeded")

    world.autoscaling.waiting_instances = throttled  # type: ignore[method-assign]


def _sweeps_after(world: World, *changes: Callable[[World], None]) -> None:
    """Sweeps an interval apart, each after its change (each may fail: what it adopted is what is judged)."""
    for change in changes:
        world.clock.advance(INTERVAL.total_seconds())
        change(world)
        with contextlib.suppress(SweepFailed, TransientError):
            world.sweep()


def test_the_action_of_a_hook_deleted_since_is_never_adopted() -> None:
    # Given an action held by this stack's terminate hook with no record, found by a sweep that read the group's hooks
    world = World()
    hooks_of, waiting_instances = world.autoscaling.hooks_of, world.autoscaling.waiting_instances
    _found_orphaned(world)

    # When the hook is deleted (its action left held: the harsher reading), and the sweeps that follow cannot read
    # the group's hooks, then read them but cannot list the held instances, then can do both
    del world.autoscaling.hooks[(GROUP, HOOK)]

    def hooks_back(w: World) -> None:
        w.autoscaling.hooks_of = hooks_of  # type: ignore[method-assign]
        _listing_fails(w)

    _sweeps_after(
        world,
        _hooks_unread,
        hooks_back,
        lambda w: setattr(w.autoscaling, "waiting_instances", waiting_instances),
    )

    # Then the action was never adopted
    assert adopted(world) is None
    assert world.metrics.counts["LifecyclesAdopted"] == 0


def test_the_action_of_a_group_no_longer_this_stacks_is_never_adopted() -> None:
    # Given an action held by this stack's terminate hook with no record in a group of this stack by its owner tag,
    # found by a sweep that read the group's hooks
    world = World()
    group = "tagged-nodes"
    world.autoscaling.hooks[(group, HOOK)] = world.autoscaling.hooks[(GROUP, HOOK)]
    world.autoscaling.tags[group] = {"nodecycle:owner": "stack-a"}
    world.autoscaling.issue("tagged", "i-0eeeeeeeeeeeeeee1", at=world.clock.now(), hook=(group, HOOK))
    held = WaitingInstance(group, {"nodecycle:owner": "stack-a"}, "i-0eeeeeeeeeeeeeee1", HOOK_TRANSITION)
    world.autoscaling.waiting.append(held)
    world.sweep()
    assert world.records.get(f"i-0eeeeeeeeeeeeeee1/terminate/adopted:{HOOK}") is None

    # When the group is handed to another stack (its owner tag changed), and the sweeps that follow cannot read its
    # hooks, then cannot list the held instances, then can do both
    world.autoscaling.tags[group] = {"nodecycle:owner": "stack-b"}
    world.autoscaling.waiting = [
        WaitingInstance(group, {"nodecycle:owner": "stack-b"}, held.instance_id, held.transition)
    ]
    hooks_of, waiting_instances = world.autoscaling.hooks_of, world.autoscaling.waiting_instances

    def listing_fails(w: World) -> None:
        w.autoscaling.hooks_of = hooks_of  # type: ignore[method-assign]
        _listing_fails(w)

    def all_answered(w: World) -> None:
        w.autoscaling.waiting_instances = waiting_instances  # type: ignore[method-assign]

    _sweeps_after(world, _hooks_unread, listing_fails, all_answered)

    # Then the action was never adopted by this stack
    assert world.records.get(f"i-0eeeeeeeeeeeeeee1/terminate/adopted:{HOOK}") is None
    assert world.metrics.counts["LifecyclesAdopted"] == 0


HOOK_TRANSITION = World().autoscaling.hooks[(GROUP, HOOK)].transition
