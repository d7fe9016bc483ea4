"""The orphans' keep-alive probes a held instance under each of this stack's hooks of its group, which Auto Scaling
tells (DescribeLifecycleHooks, read again once its ttl is over: every sweep). While that read is throttled past the
client's retries (a refresh of hundreds of nodes), an action found orphaned before is kept alive under the hook found
holding it (``_keep_alive_as_found``); one held with no record since, in a group this container read the hooks of
before, was heartbeated by no one, and lapsed at its heartbeat timeout (invariant 11), though a hook rarely changes and
a heartbeat under a hook gone since is refused, harmlessly."""

from __future__ import annotations

import pytest

from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.lifecycle import Hook
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.sweeper.test_orphans import HOOK, INTERVAL, World


def test_an_action_held_with_no_record_while_its_groups_hooks_cannot_be_read_is_kept_alive() -> None:
    # Given a sweep that read the group's hooks (for an orphan of it then)
    world = World()
    world.terminating("i-first", token="first")
    world.sweep()

    # When the group's hooks can no longer be read (throttled past the client's retries), and a terminate action of
    # another instance is held with no record, through sweeps longer than its hook's heartbeat timeout
    def throttled(group: str) -> dict[str, Hook]:
        raise TransientError("reading a group's lifecycle hooks: Throttling: Rate exceeded")

    world.autoscaling.hooks_of = throttled  # type: ignore[method-assign]
    world.clock.advance(INTERVAL.total_seconds())
    world.terminating("i-second", token="second")
    for _ in range(4):
        with pytest.raises(SweepFailed):  # (the hooks unread: the sweep fails, its alarm)
            world.sweep()
        world.clock.advance(INTERVAL.total_seconds())

        # Then the new one is kept alive, by instance id under the hook read before
        assert world.autoscaling.expires_at("second") > world.clock.now(), world.clock.now()
    assert ("i-second", HOOK) in {(h.instance_id, h.hook) for h in world.autoscaling.heartbeats}
