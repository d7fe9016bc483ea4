"""A hook whose NotificationMetadata is JSON, against the sandbox's Auto Scaling and EventBridge (moto with the
lifecycle emulation): EventBridge carries such metadata as the JSON value, not its text (the sandbox does as AWS
does, see nodecycle_sandbox/aws/notifications.py), and intake takes the action in all the same, whichever way
the event comes (direct, or by an SQS target). Failing before intake read the metadata as any JSON value: each
such action was rejected as invalid (``detail.NotificationMetadata: Input should be a valid string``), its node
drained only once the sweeper adopted it, if its hook's timeout left time for that."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.conftest import GROUP, HEARTBEAT_TIMEOUT, TERMINATE_HOOK
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    in_service,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.functions.intake.test_intake_function import work
from tests.support.emf import metric_counts
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack


def direct(event: dict[str, Any]) -> dict[str, Any]:
    return event


def by_an_sqs_target(event: dict[str, Any]) -> dict[str, Any]:
    return sqs_event(event)


@pytest.mark.parametrize("metadata", ['{"pool": "general", "drain": {"timeout": 600}}', '["general"]'])
@pytest.mark.parametrize("delivery", [direct, by_an_sqs_target], ids=lambda delivery: delivery.__name__)
def test_a_terminate_action_whose_hook_metadata_is_json_is_taken_in(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    metadata: str,
    delivery: Callable[[dict[str, Any]], dict[str, Any]],
) -> None:
    # Given the managed group's terminate hook with JSON metadata (an operator's, for their own tools), and an
    # instance of the group that the hook holds
    boto3.client("autoscaling").put_lifecycle_hook(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=TERMINATE_HOOK,
        LifecycleTransition=TERMINATING,
        HeartbeatTimeout=HEARTBEAT_TIMEOUT,
        DefaultResult="ABANDON",
        NotificationMetadata=metadata,
    )
    instance = in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(instance, TERMINATING)
    event = sandbox.bus.of(action.token)
    assert not isinstance(event["detail"]["NotificationMetadata"], str)  # (as EventBridge carries it)
    capsys.readouterr()

    # When intake takes in the action's event as it comes
    answer = sandbox.intake.handler(delivery(event), LambdaContext())

    # Then the action has its lifecycle and its first step, nothing rejected, the metadata kept as its JSON
    assert answer in (None, {"batchItemFailures": []})
    (record,) = [r for r in records() if r["token"] == action.token]
    assert [m["step"] for m in work(stack.drain_queue) if m["record_id"] == record["id"]] == ["acquire-slot"]
    rejected = [key for key in metric_counts(capsys.readouterr().out) if key[0] == "LifecycleEventsRejected"]
    assert rejected == []
    assert json.loads(record["notification_metadata"]) == json.loads(metadata)
