"""A launch's completion asks its token first when an earlier try may have landed (``attempts > refusals``: a try that
failed otherwise than refused). A completion refused to its last try withdraws its claim and counts that last refusal
(its message's redeliveries fail too, until the dead-letter queue): the try must be counted among the attempts as well,
or a try before it that may have landed (a 5xx, a read timeout) is no longer told by the counts."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import MAX_REFUSED_ATTEMPTS
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import WARM_POOL, ActionRef, Step, Transition
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeAutoscaling
from tests.unit.foundation.test_engine import World, make_record

INSTANCE = "i-0123456789abcdef0"
RECORD = f"{INSTANCE}/launch/token"


@dataclass
class LandedThenDenied(FakeAutoscaling):
    """Auto Scaling whose first completion lands and is answered with a 5xx, then denies this role every lifecycle
    call (a policy edited by hand) until ``denied`` is cleared."""

    landed: bool = False
    denied: bool = False

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        if not self.landed:
            self.landed = self.denied = True
            super().complete(action, result)
            raise TransientError("completing a lifecycle action: InternalFailure (500)")
        if self.denied:
            raise AccessRefused("completing a lifecycle action", "AccessDenied", "explicit deny")
        return super().complete(action, result)

    def heartbeat(self, action: ActionRef) -> bool:
        if self.denied:
            raise AccessRefused("recording a lifecycle action heartbeat", "AccessDenied", "explicit deny")
        return super().heartbeat(action)


def test_a_launch_completion_refused_to_its_last_try_still_asks_its_token_first_after_a_try_that_may_have_landed() -> (
    None
):
    # Given a launch out of the warm pool at its completion, whose first call landed unanswered (a 5xx), then every try
    # refused to the role, up to the last one
    autoscaling = LandedThenDenied()
    world = World(autoscaling=autoscaling)
    world.autoscaling.issue("token", INSTANCE, hook=("nodes", "launch"), held_in="Pending:Wait")
    launch = {"transition": Transition.LAUNCHING, "hook": "launch", "origin": WARM_POOL}
    world.records.create(
        make_record(
            (Step.COMPLETE, Step.DONE), Step.COMPLETE, id=RECORD, destination="AutoScalingGroup", **launch
        )
    )
    engine = world.engine({Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)})
    engine.handle(world.message(RECORD))
    for _ in range(MAX_REFUSED_ATTEMPTS - 1):
        world.clock.current = world.record().due_at
        engine.handle(world.message(RECORD))
    last = world.message(RECORD)
    world.clock.current = world.record().due_at
    with pytest.raises(AccessRefused):
        engine.handle(last)

    # When the policy is fixed, the instance has gone into service, back to the pool and out again (a new launch
    # action under the same hook), and the failed message is delivered again
    autoscaling.denied = False
    world.autoscaling.issue(
        "next", INSTANCE, at=world.clock.now(), hook=("nodes", "launch"), held_in="Pending:Wait"
    )
    engine.handle(last)

    # Then the new action is left to its own lifecycle (its address, its readiness gate)
    drawn = ActionRef(
        instance_id=INSTANCE, transition=Transition.LAUNCHING, token="next", group="nodes", hook="launch"
    )
    assert [named.token for named, _ in world.autoscaling.completed] == ["token"], (
        "the redelivered completion settled the instance's next launch action"
    )
    assert world.autoscaling.heartbeat(drawn)
