"""The orphans' keep-alive when Auto Scaling will not list the held instances (DescribeAutoScalingGroups denied to
the sweeper's role, or throttled past the client's retries): the actions the last sweep found held with no record
are still kept alive, by the instance ids and hooks that sweep found, and the part fails (logged) all the same.

Only the sweeper heartbeats an orphan, once a sweep, and a hook's heartbeat timeout may be as short as an interval
and a margin (``min_heartbeat_timeout_seconds``): a sweep whose listing failed and heartbeated nothing left such an
action to lapse before the next, and Auto Scaling applied the hook's default result (CONTINUE: an undrained
termination, invariant 11)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import LifecycleRecord, adopted_token
from nodecycle.domain.ports.lifecycle import Hook, WaitingInstance
from tests.unit.sweeper.test_orphans import AMPLE, GROUP, HOOK, INSTANCE, INTERVAL, OWNER, TOKEN, World

# The shortest heartbeat timeout the settings allow under 5-minute sweeps: an interval and a margin
SHORTEST = int(INTERVAL.total_seconds()) + 60


def sweep_as_the_sweeper_does(world: World) -> list[Exception]:
    """The orphans' two parts as the sweeper runs them: the adoptions run when the keep-alive failed; what each
    raised."""
    open_records, now = list(world.records.open_records(OWNER)), world.clock.now()
    failures: list[Exception] = []
    for part in (world.part.keep_alive, world.part.adopt):
        try:
            part(open_records, now, AMPLE)
        except Exception as error:  # (the sweeper logs it and fails the sweep at its end)
            failures.append(error)
    return failures


def shortest_hooks(world: World) -> World:
    world.autoscaling.action_timeout = SHORTEST
    world.autoscaling.hooks = {
        key: Hook(hook.transition, heartbeat_timeout=SHORTEST)
        for key, hook in world.autoscaling.hooks.items()
    }
    return world


@pytest.mark.parametrize(
    "refusal",
    [
        TransientError("DescribeAutoScalingGroups: Throttling: Rate exceeded"),
        AccessRefused(
            "listing the instances lifecycle hooks hold",
            "AccessDenied",
            "explicit deny in a service control policy",
        ),
    ],
    ids=["throttled", "denied"],
)
def test_an_orphan_found_by_the_last_sweep_is_kept_alive_while_the_held_instances_cannot_be_listed(
    refusal: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an action of this stack's hook (of the shortest heartbeat timeout allowed) whose event never became a
    # record, found held and kept alive by a sweep
    world = shortest_hooks(World())
    world.terminating()
    world.sweep()
    assert world.autoscaling.expires_at(TOKEN) == world.clock.now() + timedelta(seconds=SHORTEST)

    # When the next sweep cannot list the instances hooks hold
    def refused(names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        raise refusal

    listing = world.autoscaling.waiting_instances
    world.autoscaling.waiting_instances = refused  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds())
    failures = sweep_as_the_sweeper_does(world)

    # Then the keep-alive fails, saying so (the sweeper's alarm), but the action is kept alive all the same
    # (before: no heartbeat, and it lapsed a minute after the next sweep was due, the hook's default result applied
    # to an undrained node)
    assert world.autoscaling.expires_at(TOKEN) == world.clock.now() + timedelta(seconds=SHORTEST)
    assert failures == [refusal]
    assert "kept alive the 1 actions found orphaned before" in caplog.text

    # and, first found a sweep ago, it is adopted through intake's path (its drain starts; no second lifecycle
    # once the listing answers again)
    assert world.records.get(f"{INSTANCE}/terminate/{adopted_token(HOOK)}") is not None
    assert len(world.queues.sent) == 1
    world.autoscaling.waiting_instances = listing  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds())
    assert world.sweep()["LifecyclesAdopted"] == 0
    assert len(world.queues.sent) == 1


def test_an_orphan_whose_lifecycle_was_written_since_is_heartbeated_but_not_adopted_while_unlisted() -> None:
    # Given an orphan kept alive by a sweep, first found long enough ago to be adopted, whose event intake then
    # took after all (its record written)
    world = shortest_hooks(World())
    world.terminating()
    world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    world.sweep()  # (adopted here: its lifecycle's record written by intake's path)
    adopted = world.records.get(f"{INSTANCE}/terminate/{adopted_token(HOOK)}")
    assert adopted is not None
    sent = len(world.queues.sent)

    # When a sweep cannot list the held instances
    def throttled(names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        raise TransientError("DescribeAutoScalingGroups: Throttling: Rate exceeded")

    world.autoscaling.waiting_instances = throttled  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds())
    assert len(sweep_as_the_sweeper_does(world)) == 1  # (the keep-alive's: the adoptions have none to take)

    # Then nothing is adopted a second time, and no other group's instance is touched
    assert len(world.queues.sent) == sent
    assert {(a.group, a.instance_id) for a in world.autoscaling.heartbeats} == {(GROUP, INSTANCE)}


def test_an_orphan_found_by_the_last_sweep_is_kept_alive_while_its_groups_hooks_cannot_be_read() -> None:
    # Given an action of this stack's hook (of the shortest heartbeat timeout allowed) whose event never became a
    # record, found held and kept alive by a sweep
    world = shortest_hooks(World())
    world.terminating()
    world.sweep()

    # When the next sweep lists the held instances but cannot read its group's hooks (DescribeLifecycleHooks
    # throttled past the client's retries, or denied: read again at every sweep, its answer trusted a minute)
    def throttled(group: str) -> dict[str, Hook]:
        raise TransientError("DescribeLifecycleHooks: Throttling: Rate exceeded")

    hooks_of = world.autoscaling.hooks_of
    world.autoscaling.hooks_of = throttled  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds())
    failures = sweep_as_the_sweeper_does(world)

    # Then the action is kept alive under the hook the last sweep found holding it (before: no heartbeat, and it
    # lapsed before the next sweep), and the part fails all the same
    assert world.autoscaling.expires_at(TOKEN) == world.clock.now() + timedelta(seconds=SHORTEST)
    assert len(failures) == 1

    # and once the hooks are read again, it is adopted as first found two sweeps ago
    world.autoscaling.hooks_of = hooks_of  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds())
    assert world.sweep()["LifecyclesAdopted"] == 1


class Unlisted(list[LifecycleRecord]):
    """The open lifecycles as the sweep holds them while DynamoDB will not list them (its Query denied)."""

    def __iter__(self) -> Iterator[LifecycleRecord]:
        raise AccessRefused("listing the open lifecycles", "AccessDeniedException", "dynamodb:Query")


def test_an_orphan_found_by_the_last_sweep_is_kept_alive_while_neither_dynamodb_nor_auto_scaling_list() -> (
    None
):
    # Given an orphan (of the shortest heartbeat timeout allowed) found held and kept alive by a sweep
    world = shortest_hooks(World())
    world.terminating()
    world.sweep()

    # When the next sweep can list neither the open lifecycles nor the held instances
    def throttled(names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        raise TransientError("DescribeAutoScalingGroups: Throttling: Rate exceeded")

    world.autoscaling.waiting_instances = throttled  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds())
    with pytest.raises(TransientError):
        world.part.keep_alive(Unlisted(), world.clock.now(), AMPLE)

    # Then the action is kept alive all the same (before: no heartbeat, and it lapsed before the next sweep)
    assert world.autoscaling.expires_at(TOKEN) == world.clock.now() + timedelta(seconds=SHORTEST)
