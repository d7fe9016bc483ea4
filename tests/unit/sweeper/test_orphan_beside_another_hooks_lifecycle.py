"""An orphaned action of one of this stack's hooks beside a lifecycle of another of them on the same instance and
transition. With ManagedHooks naming two terminate hooks of a group (or "*"), a termination holds its instance
under both, one action each, one lifecycle each: one event lost, its action has no record while the other's
lifecycle is listed. Auto Scaling applies each hook's default result at that hook's own heartbeat timeout ("If the
lifecycle hook times out, Amazon EC2 Auto Scaling performs the action that you specified in the DefaultResult":
API reference, LifecycleHook.HeartbeatTimeout), ABANDON ending the instance's other actions with it: the node goes,
its drain under the other hook cut short."""

from __future__ import annotations

from nodecycle.domain.catalog import ManagedGroups
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import Transition, adopted_token
from nodecycle.domain.ports.lifecycle import Hook
from tests.unit.sweeper.test_orphans import GROUP, HOOK, INSTANCE, INTERVAL, OWNER, World

SECOND = "nodecycle-terminate-audit"  # another terminate hook of this stack on the group


class TwoHooks(World):
    """The World, its stack managing a second terminate hook on the group (ManagedHooks)."""

    def groups(self) -> ManagedGroups:
        return ManagedGroups(
            owner=OWNER,
            names=(GROUP,),
            by_tag=True,
            hooks=(HOOK, SECOND, "nodecycle-launch"),
            autoscaling=self.autoscaling,
            clock=self.clock,
        )


def test_an_orphan_under_one_hook_is_kept_alive_and_adopted_beside_another_hooks_lifecycle() -> None:
    # Given a termination held under two of this stack's hooks, the first one's event taken in (its lifecycle
    # listed, draining), the second one's lost
    world = TwoHooks()
    world.autoscaling.hooks[(GROUP, SECOND)] = Hook(Transition.TERMINATING, heartbeat_timeout=900)
    world.terminating()
    world.autoscaling.issue("second-token", INSTANCE, at=world.clock.now(), hook=(GROUP, SECOND))
    assert world.intake.accept(world.event()) is IntakeOutcome.ACCEPTED

    # When the sweeps run
    first = world.sweep()
    world.clock.advance(INTERVAL.total_seconds())
    second = world.sweep()

    # Then the second hook's action is kept alive and adopted (before: the first hook's lifecycle hid the
    # instance, and the second's action reached its heartbeat timeout unkept), and the first hook's action is
    # left to its own lifecycle
    assert (first["LifecyclesOrphaned"], second["LifecyclesAdopted"]) == (1, 1)
    assert {action.hook for action in world.autoscaling.heartbeats} == {SECOND}
    assert world.records.get(f"{INSTANCE}/terminate/{adopted_token(SECOND)}") is not None
