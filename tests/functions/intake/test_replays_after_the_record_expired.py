"""A lifecycle action told again long after its lifecycle completed it (a hook notification left in the intake
dead-letter queue and redriven by an operator a day later; a message the queue kept for days), when the table's
TTL has deleted the finished record but not its action's claim, which is kept until the action's global timeout
and a TTL past it: against the sandbox's Auto Scaling (moto with the lifecycle emulation), it starts nothing and
counts no expired action (LifecycleActionsExpired pages)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.instances import Ec2Instances
from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.intake import IntakeOutcome
from nodecycle.domain.model import Step, Transition
from nodecycle.domain.ports.lifecycle import WaitingInstance
from nodecycle.observability import metrics
from nodecycle.wiring.intake import intake, shared
from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.conftest import GROUP, TERMINATE_HOOK
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

TABLE = "nodecycle-lifecycle"
# The hook's heartbeat timeout: an hour, so its action's global timeout is 48 hours (the most Auto Scaling
# allows), longer than the shortest record TTL the stack takes (RecordTtlDays 1)
HOOK_TIMEOUT = 3600


def items() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = boto3.resource("dynamodb").Table(TABLE).scan()["Items"]
    return found


def finish(record_id: str, at: datetime) -> None:
    """The lifecycle over at ``at``, as its last step's commit leaves it (kept a TTL after it ends)."""
    store = shared().records
    record = store.get(record_id)
    assert record is not None
    done = record.model_copy(
        update={
            "seq": record.seq + 1,
            "step": Step.DONE,
            "finished_at": at,
            "completed_at": at,
            "updated_at": at,
        }
    )
    assert store.commit(done, expected_seq=record.seq)


def expire(now: datetime) -> list[str]:
    """DynamoDB's TTL at ``now``: every item whose expires_at has passed is deleted (its ids)."""
    table = boto3.resource("dynamodb").Table(TABLE)
    gone = [str(item["id"]) for item in items() if int(str(item["expires_at"])) < now.timestamp()]
    for id_ in gone:
        table.delete_item(Key={"id": id_})
    return gone


@pytest.mark.parametrize(
    ("adopted", "listed"),
    [(False, True), (False, False), (True, True)],
    ids=["taken-in", "taken-in-instance-forgotten-by-ec2", "adopted-by-the-sweeper"],
)
def test_an_action_told_again_after_its_finished_record_expired_starts_nothing_and_counts_no_expiry(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    adopted: bool,
    listed: bool,
) -> None:
    # Given a stack that keeps finished records a day, whose terminate hook times out after an hour
    monkeypatch.setenv("NODECYCLE_RECORD_TTL_DAYS", "1")
    boto3.client("autoscaling").put_lifecycle_hook(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=TERMINATE_HOOK,
        LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
        HeartbeatTimeout=HOOK_TIMEOUT,
        DefaultResult="ABANDON",
    )
    # and a terminate action, taken in from its hook's notification on the intake queue (or adopted by the
    # sweeper, its notification lost), completed by its lifecycle
    instance = in_service(sandbox)
    boto3.client("autoscaling").terminate_instance_in_auto_scaling_group(
        InstanceId=instance, ShouldDecrementDesiredCapacity=True
    )
    action = sandbox.action(instance, TERMINATING)
    told = hook_notification(instance, action.token, datetime.now(UTC))
    if adopted:
        held = WaitingInstance(GROUP, {}, instance, Transition.TERMINATING)
        assert intake().adopt(held, TERMINATE_HOOK, datetime.now(UTC)) is IntakeOutcome.ACCEPTED
        metrics.clear_metrics()  # (the sweeper's)
    else:
        assert sandbox.intake.handler(sqs_event(told), LambdaContext()) == {"batchItemFailures": []}
    (record,) = records()
    (first_step,) = [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)]
    boto3.client("autoscaling").complete_lifecycle_action(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=TERMINATE_HOOK,
        LifecycleActionToken=action.token,
        LifecycleActionResult="CONTINUE",
    )
    finish(str(record["id"]), datetime.now(UTC))
    # whose record the table's TTL deleted a day after, its action's claim kept (until the global timeout)
    later = datetime.now(UTC) + timedelta(hours=25)
    assert expire(later) == [record["id"]]
    assert items(), "the action's claim is kept past the record"
    if not listed:  # (EC2 lists a terminated instance for about an hour)
        monkeypatch.setattr(Ec2Instances, "facts", lambda self, instance_id: None)
    capsys.readouterr()

    # When the notification comes (again) 25 hours later, redriven from the dead-letter queue
    monkeypatch.setattr(SystemClock, "now", lambda self: later)
    response = sandbox.intake.handler(sqs_event(told), LambdaContext())

    # Then it starts nothing: no record, no work, no retry; and no action is counted as expired
    assert response == {"batchItemFailures": []}
    assert records() == []
    assert [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)] == [first_step]
    output = capsys.readouterr().out
    assert metric(output, "LifecycleActionsExpired") == 0
    assert metric(output, "LifecycleEventsDuplicate") == 1
