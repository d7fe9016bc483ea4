"""A hook notification that names a true action (its token, instance, group and hook, as anyone who reads the
intake queue or the hook's target can copy them) with a time of its own, taken in before the action's own event,
against the sandbox's Auto Scaling (moto with the lifecycle emulation). Auto Scaling runs the action's timers from
when it started it: a lifecycle timed from a later start would heartbeat too late, and the action would time out
with the hook's default result in the middle of its drain (the node terminated with pods on it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3

from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.conftest import HEARTBEAT_TIMEOUT
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    in_service,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack


def test_a_true_action_told_first_with_a_start_still_to_come_is_timed_from_no_later_than_its_intake(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
) -> None:
    # Given an instance of a managed group that its terminate hook holds
    instance = in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(instance, TERMINATING)
    started = datetime.now(UTC)  # (the action started before this)

    # When a hook notification of that action, dated an hour ahead, is taken in before its own event
    forged = hook_notification(instance, action.token, datetime.now(UTC) + timedelta(hours=1))
    assert sandbox.intake.handler(sqs_event(forged), LambdaContext()) == {"batchItemFailures": []}
    sandbox.intake.handler(sandbox.bus.of(action.token), LambdaContext())
    taken_in = datetime.now(UTC)

    # Then its lifecycle counts the hook's timeouts from no later than its intake: no deadline later than Auto
    # Scaling's can be
    (record,) = records()
    assert started <= taken_in
    assert datetime.fromisoformat(record["started_at"]) <= taken_in
    assert datetime.fromisoformat(record["heartbeat_deadline"]) <= taken_in + timedelta(
        seconds=HEARTBEAT_TIMEOUT
    )
