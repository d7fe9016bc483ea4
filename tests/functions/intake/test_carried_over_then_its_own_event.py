"""The instance's own event arriving after a crossed lifecycle of it was carried over to its action. A notification
named a terminating instance with another terminating instance's live token and was taken in first (an Auto Scaling
that takes a call's token alone confirms it); once that token's action ended, the lifecycle's cleanup found the hook
still holding its instance under the instance's own action and carried the drain over to it, named by the instance
from then on, as an adopted lifecycle's action is (drain.cleanup ``_carried_over``). The instance's own event comes
after that (lagging, or retried by EventBridge or the queue): it names the very action that lifecycle drains for."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.model import CARRIED_OVER, Step
from nodecycle_sandbox.aws import TERMINATING
from tests.functions.intake.conftest import GROUP
from tests.functions.intake.test_crossed_token_taken_in_second import two_terminating
from tests.functions.intake.test_foreign_and_forged_actions import (
    Sandbox,
    hook_notification,
    records,
    sandbox,  # noqa: F401 (the fixture)
)
from tests.support.emf import metric
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all


@pytest.mark.parametrize("carried_over", ["draining", "completed"])
@pytest.mark.parametrize("dated", ["after-the-own-start", "before-the-own-start"])
def test_the_own_event_of_an_action_a_carried_over_lifecycle_drains_for_starts_no_second_lifecycle(
    sandbox: Sandbox,  # noqa: F811
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    dated: str,
    carried_over: str,
) -> None:
    # Given an Auto Scaling that takes a call's token alone, two instances held by the terminate hook, and a
    # notification naming the first with the second's live token taken in before either instance's own event
    sandbox.control.configure(token_checked_against_instance=False)
    first, second = two_terminating(sandbox)
    own = sandbox.action(first, TERMINATING)
    other = sandbox.action(second, TERMINATING)
    # (dated by its sender: after the first instance's own action started, or before it)
    own_start = datetime.fromisoformat(sandbox.bus.of(own.token)["time"].replace("Z", "+00:00"))
    shift = timedelta(seconds=1 if dated == "after-the-own-start" else -5)
    crossed = hook_notification(first, other.token, own_start + shift)
    assert sandbox.intake.handler(sqs_event(crossed), LambdaContext()) == {"batchItemFailures": []}
    receive_all(stack.drain_queue)
    # ... the second's action ended since (completed by the lifecycle the sweeper adopted for it), and the crossed
    # lifecycle's cleanup carried it over to the first instance's own action: draining on (as the cleanup writes it)
    boto3.client("autoscaling").complete_lifecycle_action(
        AutoScalingGroupName=GROUP,
        LifecycleHookName=other.hook,
        LifecycleActionToken=other.token,
        LifecycleActionResult="CONTINUE",
    )
    store = DynamoRecordStore("nodecycle-lifecycle", timedelta(days=7))
    (taken,) = [r for r in store.scan("stack-a") if r.instance_id == first]
    carried = taken.model_copy(
        update={
            "seq": taken.seq + 1,
            "step": Step.EVICT,
            "drain_started_at": datetime.now(UTC),
            "extra": {**taken.extra, CARRIED_OVER: other.token},
        }
    )
    assert store.commit(carried, expected_seq=taken.seq)
    if carried_over == "completed":
        # ... and has completed the first instance's action since (named by the instance, as every completion)
        boto3.client("autoscaling").complete_lifecycle_action(
            AutoScalingGroupName=GROUP,
            LifecycleHookName=own.hook,
            InstanceId=first,
            LifecycleActionResult="CONTINUE",
        )
        now = datetime.now(UTC)
        completed = carried.model_copy(
            update={"seq": carried.seq + 1, "step": Step.CLEANUP, "completed_at": now, "outcome": "drained"}
        )
        assert store.commit(completed, expected_seq=carried.seq)
        carried = completed

    # When the first instance's own event comes (lagging, or retried)
    capsys.readouterr()
    sandbox.intake.handler(sandbox.bus.of(own.token), LambdaContext())

    # Then it is a late event of the action the carried-over lifecycle drains (or drained) for: a duplicate, as a
    # late event of an adopted action is. No second lifecycle of the action (beside a draining one: its own slot
    # ask, cordon, drain and completion; after a completed one: a lifecycle of an action over, whose first step
    # finds no action and pages as an unknown one), nothing sent, the action's claim still the carried-over one's,
    # and the true event not counted a rejected forgery (the rejected-events alarm)
    assert {(r["instance_id"], r["token"]) for r in records()} == {(first, other.token)}
    sent = [json.loads(m["Body"])["record_id"] for m in receive_all(stack.drain_queue)]
    assert f"{first}/terminate/{own.token}" not in sent
    claim = store.claim(carried)  # (the claim of the instance's action under the hook)
    assert claim is not None
    assert claim.lifecycle == carried.id
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="token-conflict") == 0
    assert metric(output, "LifecycleEventsDuplicate") == 1
