"""A completion whose call Auto Scaling took though its caller never heard so: the connection dropped after the
request was sent (botocore's retry is told "No active Lifecycle Action found"), or the completer was killed between
its call and its record (the next completer's call is told so). Either is the lifecycle's own completion with its
own result, neither an error retried to the dead-letter queue nor an action settled elsewhere, and the result it
decided (an ABANDON for a launch whose readiness gate timed out) is the one it records."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ConnectionClosedError, ReadTimeoutError

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.clients import CLIENT_CONFIG
from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.engine import COMPLETION_CLAIM, Handled
from nodecycle.domain.model import ActionRef, Step, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.aws import LAUNCHING
from nodecycle_sandbox.aws.group import HookSpec
from tests.sandbox.aws.conftest import REGION, Emulation, aws  # noqa: F401  (the emulation in process)
from tests.support.fakes import FakeAutoscaling
from tests.unit.foundation.test_engine import World, make_record

OPERATION = (
    "before-send.auto-scaling.CompleteLifecycleAction"  # (the event a before-send handler is called with)
)
LAUNCH = HookSpec("launch", LAUNCHING, heartbeat_timeout=300, default_result="CONTINUE")


def _dropped(error: type[ConnectionClosedError | ReadTimeoutError]) -> Callable[..., None]:
    """After the emulation took the first attempt, its answer never comes. (Registered on every operation's
    before-send, after moto's handler, which runs the call: one on this operation's own event would run first,
    and its raise keep the call from Auto Scaling.)"""
    attempts = [0]

    def drop(event_name: str, **_: Any) -> None:
        if event_name != OPERATION:
            return
        attempts[0] += 1
        if attempts[0] == 1:
            raise error(endpoint_url="https://autoscaling.eu-west-1.amazonaws.com")

    return drop


@pytest.mark.parametrize("error", [ConnectionClosedError, ReadTimeoutError])
def test_a_completion_whose_connection_dropped_after_auto_scaling_took_it_is_the_callers_own(
    aws: Emulation,  # noqa: F811
    error: type[ConnectionClosedError | ReadTimeoutError],
) -> None:
    # Given a launch held by its hook (whose default result, CONTINUE, is not the one asked), and an Auto Scaling
    # client as nodecycle makes them whose first CompleteLifecycleAction reaches Auto Scaling and loses its answer
    group = aws.group(LAUNCH, size=1)
    ((instance, state),) = group.instances().items()
    assert state == "Pending:Wait"
    client: Any = boto3.client(
        "autoscaling",
        region_name=REGION,
        aws_access_key_id="AKIATESTEIP000000000",
        aws_secret_access_key="testing",
        config=CLIENT_CONFIG,
    )
    client.meta.events.register("before-send", _dropped(error), unique_id="tests.Dropped")
    (held,) = [a for a in group.actions() if a.active]
    action = ActionRef(
        group="workers",
        hook="launch",
        instance_id=instance,
        token=held.token,
        transition=Transition.LAUNCHING,
    )

    # When the adapter completes it with ABANDON (botocore retries; the retry is told there is no active action)
    completed = AutoscalingActions(client).complete(action, ActionResult.ABANDON)

    # Then the completion is the caller's, and Auto Scaling settled it once, with the result asked
    assert completed is True
    (settled,) = [a for a in group.actions() if a.token == held.token]
    assert (settled.outcome, settled.result) == ("completed", "ABANDON")


class KilledAfterItsCall(FakeAutoscaling):
    """Auto Scaling that takes the first completion, and the completer killed before it hears (its Lambda's
    timeout, out of memory): nothing after the call runs."""

    killed = False

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        landed = super().complete(action, result)
        if not self.killed:
            self.killed = True
            raise SystemExit("killed")
        return landed


def test_a_launch_to_be_abandoned_whose_completer_was_killed_after_its_call_is_recorded_abandoned_by_us() -> (
    None
):
    # Given a launch whose readiness gate timed out (ABANDON decided) at its completion, whose completer is killed
    # right after Auto Scaling took its call
    world = World(autoscaling=KilledAfterItsCall())
    record = make_record(
        (Step.READY_GATE, Step.COMPLETE, Step.DONE),
        Step.COMPLETE,
        id="i-0123456789abcdef0/launch/token",
        transition=Transition.LAUNCHING,
        hook="launch",
        result=ActionResult.ABANDON,
        outcome="readiness-timeout",
    )
    world.records.create(record)
    engine = world.engine({Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)})
    message = world.message(record.id)
    with pytest.raises(SystemExit):
        engine.handle(message)
    assert COMPLETION_CLAIM in world.record().extra  # (its claim, committed before its call, stays)

    # When its message comes again (Lambda's redelivery), then the watch it sends, then the step re-sent
    handled = [engine.handle(message)]
    while not world.record().finished and (queued := world.queues.take()):
        world.clock.advance(queued[0].delay)
        handled.append(engine.handle(queued[0].message))

    # Then the lifecycle is over as completed by its own call, with ABANDON, once: no error, no retry to the dead-
    # letter queue, no action settled elsewhere, not counted again
    done = world.record()
    assert handled[0] is Handled.WATCHING
    assert handled[-1] is Handled.DONE
    assert (done.result, done.outcome) == (ActionResult.ABANDON, "readiness-timeout")
    assert not done.extra.get(SETTLED_ELSEWHERE)
    assert done.action_confirmed
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.ABANDON]
    assert world.metrics.counts["LifecycleActionsSettledElsewhere"] == 0
    assert world.metrics.counts["StepRetries"] == 0
