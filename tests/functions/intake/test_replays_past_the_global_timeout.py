"""A lifecycle action told again after its global timeout (a hook notification left in the intake dead-letter
queue and redriven by an operator the next morning, while the other path's message had been taken in), its
lifecycle long finished: against the sandbox's Auto Scaling, it is a duplicate, not an event rejected as
expired (RejectedEventsAlarm pages for any rejection, and says the queue stalled). One that no lifecycle took in
is still rejected as expired."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import Transition
from nodecycle.domain.ports.lifecycle import WaitingInstance
from nodecycle.observability import metrics
from nodecycle.wiring.intake import intake
from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.conftest import GROUP, HEARTBEAT_TIMEOUT, TERMINATE_HOOK
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    in_service,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.functions.intake.test_replays_after_the_record_expired import finish
from tests.support.emf import metric
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all

# Past the action's global timeout (100 heartbeat timeouts: 8 h 20 min), well within the record's TTL (14 days)
LATER = timedelta(seconds=100 * HEARTBEAT_TIMEOUT) + timedelta(minutes=40)


@pytest.mark.parametrize(
    "taken_in", ["by-its-event", "by-the-sweepers-adoption", "never", "never-adopted-only-a-later-action"]
)
def test_an_action_told_after_its_global_timeout_is_rejected_as_expired_only_if_no_lifecycle_took_it_in(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    taken_in: str,
) -> None:
    # Given a terminate action whose lifecycle was taken in from its event (or adopted by the sweeper), completed
    # the action and finished; or that nothing took in, left to time out (a notification dated when an earlier
    # action of the instance started, that timed out before the sweeper adopted the one held now)
    instance = in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(instance, TERMINATING)
    earlier = taken_in == "never-adopted-only-a-later-action"
    started = datetime.now(UTC) - (LATER if earlier else timedelta(0))
    told = hook_notification(instance, action.token, started)
    if taken_in == "by-its-event":
        assert sandbox.intake.handler(sqs_event(told), LambdaContext()) == {"batchItemFailures": []}
    elif taken_in == "by-the-sweepers-adoption" or earlier:
        held = WaitingInstance(GROUP, {}, instance, Transition.TERMINATING)
        assert intake().adopt(held, TERMINATE_HOOK, datetime.now(UTC)) is IntakeOutcome.ACCEPTED
        metrics.clear_metrics()  # (the sweeper's)
    boto3.client("autoscaling").complete_lifecycle_action(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=TERMINATE_HOOK,
        LifecycleActionToken=action.token,
        LifecycleActionResult="CONTINUE" if taken_in != "never" else "ABANDON",
    )
    for record in records():
        finish(str(record["id"]), datetime.now(UTC))
    finished = records()
    sent = receive_all(stack.drain_queue)
    capsys.readouterr()

    # When its notification comes (again) after its global timeout, redriven from the dead-letter queue
    later = datetime.now(UTC) + (timedelta(minutes=5) if earlier else LATER)
    monkeypatch.setattr(SystemClock, "now", lambda self: later)
    response = sandbox.intake.handler(sqs_event(told), LambdaContext())

    # Then nothing is written, sent or retried; it is a duplicate of the lifecycle that took it in, and an
    # expired event (rejected) only when none did
    assert response == {"batchItemFailures": []}
    assert records() == finished
    assert [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)] == [
        json.loads(m["Body"]) for m in sent
    ]
    output = capsys.readouterr().out
    never = taken_in.startswith("never")
    assert metric(output, "LifecycleEventsRejected", reason="expired") == (1 if never else 0)
    assert metric(output, "LifecycleEventsDuplicate") == (0 if never else 1)
