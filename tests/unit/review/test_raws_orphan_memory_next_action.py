"""The orphans' keep-alive while Auto Scaling will not list the held instances heartbeats the actions found orphaned
before by instance id and hook (``OrphanedActions._keep_found_alive``), which names whatever action the hook holds
for the instance now: after the one found orphaned ended, the instance's next action under the same hook (an
instance out of its warm pool into service, under the launch hook that held its move into the pool). Heartbeated,
it is only kept alive; but taken for the orphan found before, it must not be adopted as that one (its move into the
pool: completed at once, no readiness gate) nor before a sweep's interval has let its own event come."""

from __future__ import annotations

from nodecycle.domain.errors import AccessRefused
from nodecycle.domain.model import WARM_POOL, Step, Transition, adopted_token
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WaitingInstance
from tests.unit.review.test_rsweep_orphans_unlisted import sweep_as_the_sweeper_does
from tests.unit.sweeper.test_orphans import GROUP, INTERVAL, World

LAUNCH_HOOK, INSTANCE = "nodecycle-launch", "i-0aaaaaaaaaaaaaaa1"


def test_the_next_action_of_an_orphans_hook_is_not_adopted_as_the_orphan_found_before() -> None:
    # Given an instance launching into its warm pool, its event lost, found held by a sweep
    world = World()
    world.autoscaling.issue("into-the-pool", INSTANCE, at=world.clock.now(), hook=(GROUP, LAUNCH_HOOK))
    into_the_pool = WaitingInstance(GROUP, {}, INSTANCE, Transition.LAUNCHING, destination=WARM_POOL)
    world.autoscaling.waiting.append(into_the_pool)
    world.sweep()

    # and Auto Scaling not listing the held instances from then on (a policy edited)
    def denied(names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        raise AccessRefused("listing the instances lifecycle hooks hold", "AccessDenied", "explicit deny")

    world.autoscaling.waiting_instances = denied  # type: ignore[method-assign]

    # and the next sweep adopting it (first found a sweep ago), its lifecycle then over, its action completed
    world.clock.advance(INTERVAL.total_seconds())
    sweep_as_the_sweeper_does(world)
    record_id = f"{INSTANCE}/launch/{adopted_token(LAUNCH_HOOK)}"
    moved = world.records.get(record_id)
    assert moved is not None
    assert moved.destination == WARM_POOL
    world.autoscaling.complete(into_the_pool.action(LAUNCH_HOOK), ActionResult.CONTINUE)
    world.records.commit(moved.model_copy(update={"step": Step.DONE, "seq": moved.seq + 1}), moved.seq)
    world.autoscaling.waiting.clear()

    # When the instance leaves its pool into service (its next action, under the same launch hook; its event on its
    # way) and a sweep comes while the listing is still refused
    world.clock.advance(INTERVAL.total_seconds())
    world.autoscaling.issue("into-service", INSTANCE, at=world.clock.now(), hook=(GROUP, LAUNCH_HOOK))
    world.autoscaling.waiting.append(
        WaitingInstance(
            GROUP, {}, INSTANCE, Transition.LAUNCHING, origin=WARM_POOL, destination="AutoScalingGroup"
        )
    )
    sent = len(world.queues.sent)
    sweep_as_the_sweeper_does(world)

    # Then no lifecycle of the pool's move is started for it (its plan would complete the launch into service at
    # once, without its readiness gate), nor any lifecycle before its event had a sweep's interval to come (before:
    # adopted at once as the pool's move, first found ten minutes before)
    after = world.records.get(record_id)
    assert after is not None
    assert (after.seq, after.step) == (moved.seq + 1, Step.DONE)
    assert len(world.queues.sent) == sent
