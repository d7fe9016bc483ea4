"""The exact requests the AWS adapters make, and how they read AWS's answers (botocore Stubber: the request
shape is what matters here, and moto would accept a wrong one)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from nodecycle.adapters.autoscaling import AutoscalingActions
from nodecycle.adapters.sqs_queues import SqsWorkQueues
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import ActionRef, Step, Transition
from nodecycle.domain.ports import WorkMessage
from nodecycle.settings import ActionResult

TOKEN = "9f0c3d3e-6a8b-4c8e-9d57-2f7b1e0a6c41"
ACTION = ActionRef(
    group="nodes-general",
    hook="nodecycle-terminate",
    instance_id="i-0a1b2c3d4e5f60718",
    token=TOKEN,
    transition=Transition.TERMINATING,
)
ACTION_PARAMS = {
    "AutoScalingGroupName": "nodes-general",
    "LifecycleHookName": "nodecycle-terminate",
    "InstanceId": "i-0a1b2c3d4e5f60718",
    "LifecycleActionToken": TOKEN,
}


@pytest.fixture
def autoscaling() -> Iterator[tuple[AutoscalingActions, Stubber]]:
    client = boto3.client("autoscaling")
    with Stubber(client) as stubber:
        yield AutoscalingActions(client), stubber
        stubber.assert_no_pending_responses()


def _instance(state: str) -> dict[str, Any]:
    return {
        "AutoScalingInstances": [
            {
                "InstanceId": ACTION.instance_id,
                "AutoScalingGroupName": ACTION.group,
                "AvailabilityZone": "eu-west-1a",
                "LifecycleState": state,
                "HealthStatus": "HEALTHY",
                "ProtectedFromScaleIn": False,
            }
        ]
    }


def test_complete_names_the_action_by_token_with_the_result(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    adapter, stubber = autoscaling
    stubber.add_response(
        "complete_lifecycle_action", {}, {**ACTION_PARAMS, "LifecycleActionResult": "CONTINUE"}
    )
    assert adapter.complete(ACTION, ActionResult.CONTINUE) is True


def test_a_heartbeat_names_the_action_by_token(autoscaling: tuple[AutoscalingActions, Stubber]) -> None:
    adapter, stubber = autoscaling
    stubber.add_response("record_lifecycle_action_heartbeat", {}, ACTION_PARAMS)
    assert adapter.heartbeat(ACTION) is True


@pytest.mark.parametrize("state", ["Terminating:Proceed", "Terminated", None])
def test_no_active_action_is_read_from_the_instance_state_not_the_message(
    autoscaling: tuple[AutoscalingActions, Stubber], state: str | None
) -> None:
    # Given AWS refusing the completion with a ValidationError while the instance no longer waits
    adapter, stubber = autoscaling
    stubber.add_client_error(
        "complete_lifecycle_action", "ValidationError", "No active Lifecycle Action found with token " + TOKEN
    )
    stubber.add_response(
        "describe_auto_scaling_instances",
        _instance(state) if state else {"AutoScalingInstances": []},
        {"InstanceIds": [ACTION.instance_id]},
    )
    # Then the action counts as settled already: completing twice is harmless
    assert adapter.complete(ACTION, ActionResult.CONTINUE) is False


def test_a_validation_error_while_the_instance_waits_is_a_real_error(
    autoscaling: tuple[AutoscalingActions, Stubber],
) -> None:
    adapter, stubber = autoscaling
    stubber.add_client_error("complete_lifecycle_action", "ValidationError", "1 validation error detected")
    stubber.add_response(
        "describe_auto_scaling_instances",
        _instance("Terminating:Wait"),
        {"InstanceIds": [ACTION.instance_id]},
    )
    with pytest.raises(Exception, match="validation error"):
        adapter.complete(ACTION, ActionResult.CONTINUE)


def test_throttling_is_a_transient_error(autoscaling: tuple[AutoscalingActions, Stubber]) -> None:
    adapter, stubber = autoscaling
    stubber.add_client_error("record_lifecycle_action_heartbeat", "Throttling", "Rate exceeded", 400)
    with pytest.raises(TransientError, match="Rate exceeded"):
        adapter.heartbeat(ACTION)


def test_a_work_message_goes_to_its_workers_queue_with_its_delay() -> None:
    client = boto3.client("sqs")
    message = WorkMessage(record_id=f"{ACTION.instance_id}/terminate/{TOKEN}", seq=3, step=Step.EVICT)
    with Stubber(client) as stubber:
        stubber.add_response(
            "send_message",
            {"MessageId": "m-1", "MD5OfMessageBody": "x"},
            {
                "QueueUrl": "https://sqs.eu-west-1.amazonaws.com/123456789012/drain",
                # defaults (no watch, no wake) are left out: the body names the record, its seq and step
                "MessageBody": f'{{"record_id":"{message.record_id}","seq":3,"step":"evict"}}',
                "DelaySeconds": 17,
            },
        )
        queues = SqsWorkQueues(
            {Worker.DRAIN: "https://sqs.eu-west-1.amazonaws.com/123456789012/drain", Worker.EIP: "eip"},
            client,
        )
        queues.send(Worker.DRAIN, message, delay_seconds=17)
        stubber.assert_no_pending_responses()
