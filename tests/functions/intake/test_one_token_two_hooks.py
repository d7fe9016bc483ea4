"""One lifecycle token told under two groups or two hooks, or as two moves (from a warm pool, or not), against
the sandbox's Auto Scaling (moto with the lifecycle emulation). Auto Scaling issues a token for one action of one
hook of one group, and renames neither (a hook put under a new name is another hook, whose actions have tokens of
their own): one of the two messages is forged or broken. Auto Scaling tells which (it holds the action under its
own group and hook alone, and its instance in the wait state of its move); the other is rejected where an
operator sees it, never taken for a quiet duplicate, and the true action is the one that goes on."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import WARM_POOL
from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.conftest import GROUP, HEARTBEAT_TIMEOUT, TERMINATE_HOOK, make_group
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    in_service,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.support.emf import metric
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all

OTHER_GROUP = "nodes-other"
OTHER_HOOK = "nodecycle-terminate-too"


@pytest.fixture
def two_groups_and_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    """This stack manages a second group, and every hook: its group has a second terminate hook."""
    monkeypatch.setenv("NODECYCLE_MANAGED_GROUPS", f"{GROUP},{OTHER_GROUP}")
    monkeypatch.setenv("NODECYCLE_MANAGED_HOOKS", "*")


def with_other(names: str) -> None:
    """The other group (``group``) or the other terminate hook of this one (``hook``), made on the sandbox
    (``move``: nothing, the message names the action's move from a warm pool)."""
    if names == "group":
        make_group(OTHER_GROUP)
    elif names == "hook":
        boto3.client("autoscaling").put_lifecycle_hook(
            AutoScalingGroupName=GROUP,
            LifecycleHookName=OTHER_HOOK,
            LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
            HeartbeatTimeout=HEARTBEAT_TIMEOUT,
            DefaultResult="CONTINUE",
        )


def renamed(body: dict[str, Any], names: str) -> dict[str, Any]:
    if names == "group":
        return {**body, "AutoScalingGroupName": OTHER_GROUP}
    if names == "hook":
        return {**body, "LifecycleHookName": OTHER_HOOK}
    return {**body, "Origin": WARM_POOL}  # (a terminate from a warm pool has no node to drain)


NAMED = {
    "group": OTHER_GROUP,
    "hook": OTHER_HOOK,
    "move": WARM_POOL,
}  # what the other message's log line names
NAMES = ["group", "hook", "move"]


def terminating(on: Sandbox) -> tuple[str, str]:
    """An instance of the managed group its terminate hook holds, and that action's token."""
    instance = in_service(on)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    (action,) = [
        a
        for a in on.control.actions()
        if a.instance_id == instance and a.transition == TERMINATING and a.hook == TERMINATE_HOOK and a.active
    ]
    return instance, action.token


def warnings(output: str) -> list[str]:
    return [str(json.loads(line)["message"]) for line in output.splitlines() if '"level":"WARNING"' in line]


@pytest.mark.parametrize("names", NAMES)
def test_a_token_taken_in_told_again_under_another_group_or_hook_is_rejected_not_a_quiet_duplicate(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    two_groups_and_hooks: None,
    capsys: pytest.CaptureFixture[str],
    names: str,
) -> None:
    # Given a terminate action of the managed group whose event was taken in
    with_other(names)
    instance, token = terminating(sandbox)
    sandbox.intake.handler(sandbox.bus.of(token), LambdaContext())
    (true,) = records()
    sent = [m["MessageId"] for m in receive_all(stack.drain_queue)]
    capsys.readouterr()

    # When a hook notification names the same instance and token under another managed group or hook
    forged = renamed(hook_notification(instance, token, datetime.now(UTC)), names)
    assert sandbox.intake.handler(sqs_event(forged), LambdaContext()) == {"batchItemFailures": []}

    # Then nothing is written or sent for it, and it is counted and logged as a conflict, naming both
    assert records() == [true]
    assert [m["MessageId"] for m in receive_all(stack.drain_queue)] == sent
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="token-conflict") == 1
    assert metric(output, "LifecycleEventsDuplicate") == 0
    (warning,) = [w for w in warnings(output) if token in w and w.startswith("dropped")]
    assert NAMED[names] in warning
    assert true["hook"] in warning
    assert true["group"] in warning


@pytest.mark.parametrize("names", NAMES)
def test_a_token_told_first_under_another_group_or_hook_gives_way_to_its_true_event(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    two_groups_and_hooks: None,
    capsys: pytest.CaptureFixture[str],
    names: str,
) -> None:
    # Given a terminate action of the managed group, whose token a hook notification sent to the intake queue
    # named first under another managed group or hook (its record written, its first step sent)
    with_other(names)
    instance, token = terminating(sandbox)
    forged = renamed(hook_notification(instance, token, datetime.now(UTC)), names)
    assert sandbox.intake.handler(sqs_event(forged), LambdaContext()) == {"batchItemFailures": []}
    (taken,) = records()
    told = sandbox.bus.of(token)["detail"]
    assert (taken["group"], taken["hook"], taken["origin"]) != (GROUP, TERMINATE_HOOK, told["Origin"])
    capsys.readouterr()

    # When the action's own event arrives, by EventBridge
    sandbox.intake.handler(sandbox.bus.of(token), LambdaContext())

    # Then the lifecycle goes on under the action's own group and hook, with a first step of its own (the
    # other's arrives stale), and the conflict is counted and logged
    (record,) = records()
    assert (record["group"], record["hook"], record["token"]) == (GROUP, TERMINATE_HOOK, token)
    assert (record["origin"], record["destination"]) == (told["Origin"], told["Destination"])
    assert record["seq"] == taken["seq"] + 1
    sent = [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)]
    assert {"record_id": record["id"], "seq": record["seq"], "step": record["step"]} in sent
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="token-conflict") == 1
    assert any(token in w and taken["group"] in w and NAMED[names] in w for w in warnings(output))


def test_a_token_told_first_under_another_group_whose_step_runs_gives_way_at_the_true_events_retry(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    two_groups_and_hooks: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a terminate action whose token a hook notification named first under another managed group, and
    # whose lifecycle has begun its first step (which will find its action unknown to Auto Scaling)
    with_other("group")
    instance, token = terminating(sandbox)
    forged = renamed(hook_notification(instance, token, datetime.now(UTC)), "group")
    sandbox.intake.handler(sqs_event(forged), LambdaContext())
    (taken,) = records()
    table = boto3.resource("dynamodb").Table("nodecycle-lifecycle")
    table.update_item(
        Key={"id": taken["id"]},
        UpdateExpression="SET updated_at = :now",
        ExpressionAttributeValues={":now": datetime.now(UTC).isoformat()},
    )

    # When the action's own event arrives by the queue (an EventBridge rule's SQS target)
    true = sqs_event(sandbox.bus.of(token))
    response = sandbox.intake.handler(true, LambdaContext())

    # Then it fails alone, to be retried (the other lifecycle still runs), and nothing is written over
    assert response == {"batchItemFailures": [{"itemIdentifier": "message-0"}]}
    assert [(r["group"], r["seq"]) for r in records()] == [(OTHER_GROUP, taken["seq"])]

    # And once that lifecycle is over (its step found the action unknown), the retry takes the record over
    table.update_item(
        Key={"id": taken["id"]},
        UpdateExpression="SET #s = :done, finished_at = :now, outcome = :outcome REMOVE open_owner, due_epoch",
        ExpressionAttributeNames={"#s": "step"},
        ExpressionAttributeValues={
            ":done": "done",
            ":now": datetime.now(UTC).isoformat(),
            ":outcome": "unknown-action",
        },
    )
    assert sandbox.intake.handler(true, LambdaContext()) == {"batchItemFailures": []}
    (record,) = records()
    assert (record["group"], record["hook"], record["step"]) == (GROUP, TERMINATE_HOOK, "acquire-slot")
    assert record["seq"] == taken["seq"] + 1
    assert "open_owner" in record  # open again, in the sweeper's index
