"""A lifecycle action whose event reaches intake after the hook's heartbeat timeout (the intake queue stalled:
intake throttled or failing, the event source paused; or Lambda's retries of an EventBridge event), against the
sandbox's Auto Scaling, which applies the hook's default result at that timeout as Auto Scaling does. The
action is over, the instance gone or going without a drain: that is an expired action (its alarm says a node
may have gone undrained), not work for a lifecycle whose first step would find no action and report it as
unknown (forged, replayed, nothing disrupted)."""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from nodecycle_sandbox.aws import LAUNCHING, TERMINATING
from nodecycle_sandbox.aws.records import REPLACE_ROOT_VOLUME
from tests.functions.intake.conftest import GROUP, TERMINATE_HOOK
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    in_service,
    records,
    sandbox,
)
from tests.support.emf import metric
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all

__all__ = ["sandbox"]  # (the fixture)

SHORT_TIMEOUT = 1  # seconds: the terminate hook's heartbeat timeout, which the test waits out


@pytest.mark.parametrize("default_result", ["ABANDON", "CONTINUE"])
@pytest.mark.parametrize("delivery", ["hook-notification", "eventbridge"])
def test_an_action_whose_heartbeat_timeout_passed_before_its_event_came_is_an_expired_action_not_work(
    sandbox: Sandbox,
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    default_result: str,
    delivery: str,
) -> None:
    # Given a terminate hook with a short heartbeat timeout, and an instance of its group that it holds
    boto3.client("autoscaling").put_lifecycle_hook(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=TERMINATE_HOOK,
        LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
        HeartbeatTimeout=SHORT_TIMEOUT,
        DefaultResult=default_result,
    )
    instance = in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(instance, TERMINATING)
    started = datetime.fromtimestamp(action.started_at, UTC)
    event = (
        sqs_event(hook_notification(instance, action.token, started))
        if delivery == "hook-notification"
        else sandbox.bus.of(action.token)
    )

    # When its event reaches intake only after the heartbeat timeout (Auto Scaling applied the default result)
    time.sleep(max(0.0, action.deadline - time.time()) + 0.05)
    response = sandbox.intake.handler(event, LambdaContext())

    # Then nothing is written or sent for it, and it is neither retried nor taken for an unknown action: it is
    # rejected as expired, counted as an action that ended without nodecycle's completion, with a line saying so
    assert response in (None, {"batchItemFailures": []})
    (ended,) = [a for a in sandbox.control.actions() if a.token == action.token]
    assert (ended.outcome, ended.result) == ("heartbeat-timeout", default_result)
    assert records() == []
    assert receive_all(stack.drain_queue) == []
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="expired") == 1
    assert metric(output, "LifecycleActionsExpired") == 1
    warnings = [json.loads(line)["message"] for line in output.splitlines() if '"level":"WARNING"' in line]
    assert any("heartbeat timeout" in line and "default result" in line for line in warnings), warnings


def test_a_late_duplicate_of_an_action_taken_in_is_no_expired_action(
    sandbox: Sandbox, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a terminate action whose event was taken in in time (its lifecycle written)
    boto3.client("autoscaling").put_lifecycle_hook(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=TERMINATE_HOOK,
        LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
        HeartbeatTimeout=SHORT_TIMEOUT,
        DefaultResult="ABANDON",
    )
    instance = in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(instance, TERMINATING)
    sandbox.intake.handler(sandbox.bus.of(action.token), LambdaContext())
    (record,) = records()
    capsys.readouterr()

    # When another delivery of it comes after the action ended (here, at its heartbeat timeout)
    time.sleep(max(0.0, action.deadline - time.time()) + 0.05)
    sandbox.intake.handler(sandbox.bus.of(action.token), LambdaContext())

    # Then it is a duplicate of that lifecycle, whose own steps say how its action ended: not counted again here
    assert records() == [record]
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsDuplicate") == 1
    assert metric(output, "LifecycleActionsExpired") == 0
    assert metric(output, "LifecycleEventsRejected") == 0


def test_a_terminate_action_of_an_instance_in_service_dated_past_its_timeout_is_no_expired_action(
    sandbox: Sandbox, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance of a managed group in service, and a hook notification on the intake queue naming it
    # with a token no hook issued and a time past the hook's heartbeat timeout (forged, or a replay of a token
    # long over: an action that timed out at terminate leaves no instance in service)
    instance = in_service(sandbox)
    long_ago = datetime.now(UTC) - timedelta(minutes=10)  # (the hook's timeout: 300 s)

    # When intake takes it in
    forged = hook_notification(instance, str(uuid.uuid4()), long_ago)
    assert sandbox.intake.handler(sqs_event(forged), LambdaContext()) == {"batchItemFailures": []}

    # Then it is not told as an action that timed out (no node went undrained): its lifecycle's check finds no
    # action and tells it as unknown, as before
    output = capsys.readouterr().out
    assert metric(output, "LifecycleActionsExpired") == 0
    assert metric(output, "LifecycleEventsRejected", reason="expired") == 0


def test_a_root_volume_replacement_whose_timeout_passed_before_its_event_came_is_an_expired_action(
    sandbox: Sandbox, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a terminate hook with a short heartbeat timeout, and an instance of its group that an instance refresh
    # replacing root volumes holds under it (ReplacingRootVolume:Wait)
    autoscaling = boto3.client("autoscaling")
    autoscaling.put_lifecycle_hook(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=TERMINATE_HOOK,
        LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
        HeartbeatTimeout=SHORT_TIMEOUT,
        DefaultResult="CONTINUE",
    )
    instance = in_service(sandbox)
    autoscaling.start_instance_refresh(
        AutoScalingGroupName=GROUP,
        Strategy="ReplaceRootVolume",
        Preferences={"MinHealthyPercentage": 0, "InstanceWarmup": 0},
    )
    action = sandbox.action(instance, TERMINATING)
    assert action.action == REPLACE_ROOT_VOLUME
    event = sandbox.bus.of(action.token)

    # When its event reaches intake only once the timeout let the replacement go on and the instance is back on its
    # new root volume, held by the launch hook (Pending:Wait): where the hook's default result put it
    time.sleep(max(0.0, action.deadline - time.time()) + 0.05)
    deadline = time.time() + 10
    while not [
        a
        for a in sandbox.control.actions()
        if a.instance_id == instance and a.transition == LAUNCHING and a.active
    ]:
        assert time.time() < deadline, "the instance never came back through the launch hook"
        time.sleep(0.1)
    capsys.readouterr()
    response = sandbox.intake.handler(event, LambdaContext())

    # Then it is an expired action (its node went undrained), not a lifecycle whose check would page for an unknown
    # (forged) action
    assert response in (None, {"batchItemFailures": []})
    (ended,) = [a for a in sandbox.control.actions() if a.token == action.token]
    assert (ended.outcome, ended.result) == ("heartbeat-timeout", "CONTINUE")
    assert records() == []
    assert receive_all(stack.drain_queue) == []
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="expired") == 1
    assert metric(output, "LifecycleActionsExpired") == 1


def test_a_replacement_dated_past_its_timeout_for_an_instance_still_held_for_one_is_no_expired_action(
    sandbox: Sandbox, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance that an instance refresh replacing root volumes holds under the terminate hook (300 s)
    instance = in_service(sandbox)
    boto3.client("autoscaling").start_instance_refresh(
        AutoScalingGroupName=GROUP,
        Strategy="ReplaceRootVolume",
        Preferences={"MinHealthyPercentage": 0, "InstanceWarmup": 0},
    )
    action = sandbox.action(instance, TERMINATING)
    true_event = sandbox.bus.of(action.token)

    # When an event of a replacement of it comes with a token Auto Scaling does not hold, dated past the hook's
    # timeout (forged, or a replay of one long over)
    long_ago = datetime.now(UTC) - timedelta(minutes=10)
    forged = {
        **true_event,
        "time": long_ago.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "detail": {**true_event["detail"], "LifecycleActionToken": str(uuid.uuid4())},
    }
    capsys.readouterr()
    sandbox.intake.handler(forged, LambdaContext())

    # Then it is not told as an action that timed out: the instance is still held for its replacement, under
    # the action of another token
    output = capsys.readouterr().out
    assert metric(output, "LifecycleActionsExpired") == 0
    assert metric(output, "LifecycleEventsRejected", reason="expired") == 0
