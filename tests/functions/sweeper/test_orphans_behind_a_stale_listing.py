"""The orphans' keep-alive behind a listing that lags (the open lifecycles come from a global secondary index):
an instance whose listed lifecycle still shows its action open is taken for that lifecycle's, and not probed.
One held where that lifecycle's action never holds it (a warm pool's instance launched into the pool, its launch
completed, then taken out of the pool at once under the same hook: a new action, whose event was lost) is
another action, and is kept alive as an orphan."""

from __future__ import annotations

from nodecycle.domain.model import WARM_POOL, LifecycleRecord, Step, Transition
from nodecycle.domain.ports.lifecycle import WaitingInstance
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import make_record
from tests.unit.sweeper.test_orphans import AMPLE, GROUP, INSTANCE, World

LAUNCH_HOOK = "nodecycle-launch"


def launched_into_the_pool(world: World) -> LifecycleRecord:
    """The lifecycle of the instance's launch into the warm pool, open (as the listing shows it)."""
    record = make_record((Step.COMPLETE, Step.DONE), Step.COMPLETE).model_copy(
        update={
            "id": f"{INSTANCE}/launch/into-pool",
            "instance_id": INSTANCE,
            "transition": Transition.LAUNCHING,
            "hook": LAUNCH_HOOK,
            "group": GROUP,
            "token": "into-pool",
            "origin": "EC2",
            "destination": WARM_POOL,
        }
    )
    assert record.action_open
    return record


def test_an_instance_held_out_of_the_pool_behind_a_listed_launch_into_it_is_kept_alive() -> None:
    # Given the listing of the open lifecycles showing the launch into the pool still open (the index lags: the
    # table says it completed), and the instance, taken out of the pool since, held in Pending:Wait by the
    # stack's launch hook for a new action whose event was lost
    world = World()
    listed = launched_into_the_pool(world)
    world.autoscaling.issue("out-of-pool", INSTANCE, at=T0, hook=(GROUP, LAUNCH_HOOK), held_in="Pending:Wait")
    world.autoscaling.waiting.append(WaitingInstance(GROUP, {}, INSTANCE, Transition.LAUNCHING))

    # When the orphans' keep-alive runs on that listing
    counts = world.part.keep_alive([listed], world.clock.now(), AMPLE)

    # Then the held action is probed, kept alive by instance id, and counted an orphan (before: taken for the
    # listed launch into the pool, it was not looked at until the index caught up)
    assert counts["LifecyclesOrphaned"] == 1
    assert [(h.instance_id, h.hook) for h in world.autoscaling.heartbeats] == [(INSTANCE, LAUNCH_HOOK)]


def test_an_instance_held_where_its_listed_lifecycles_action_holds_it_is_not_probed() -> None:
    # Given the listing showing a launch into the pool open, and the instance held in the pool's own wait state
    # (Warmed:Pending:Wait) by the launch hook: that lifecycle's action
    world = World()
    listed = launched_into_the_pool(world)
    world.autoscaling.issue(
        "into-pool", INSTANCE, at=T0, hook=(GROUP, LAUNCH_HOOK), held_in="Warmed:Pending:Wait"
    )
    world.autoscaling.waiting.append(
        WaitingInstance(GROUP, {}, INSTANCE, Transition.LAUNCHING, destination=WARM_POOL)
    )

    # When the orphans' keep-alive runs on that listing
    counts = world.part.keep_alive([listed], world.clock.now(), AMPLE)

    # Then it is that lifecycle's: nothing probed, no orphan
    assert counts["LifecyclesOrphaned"] == 0
    assert world.autoscaling.heartbeats == []
