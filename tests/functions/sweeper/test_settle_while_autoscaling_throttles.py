"""The sweeper settling an adopted action near its global timeout, on moto, while Auto Scaling throttles
DescribeAutoScalingInstances past botocore's retries. An adopted action is completed by instance id, which
completes whatever action the hook holds for the instance now: so its completion looks where the instance is
first (``AutoscalingActions._still_held``). Unanswered, that look must not be taken as "still held": nothing is
completed (invariant 8: a newer action of the instance, undrained, would be settled with this one's result),
and the lifecycle is left at its completion, claimed by the sweep, for the engine's retry (invariant 2)."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from nodecycle.domain.model import Step, adopted_token
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.functions.intake.conftest import HEARTBEAT_TIMEOUT
from tests.functions.sweeper.test_sweeper_function import invocation, kept_to_the_end, record, store
from tests.support.events import load_event
from tests.support.stack import Stack, receive_all


def test_an_adopted_action_is_not_completed_while_auto_scaling_does_not_say_where_its_instance_is(
    sweeper: ModuleType, stack: Stack
) -> None:
    # Given an adopted lifecycle (its action named by instance id alone) stuck a minute before its action's
    # global timeout, and Auto Scaling throttling DescribeAutoScalingInstances at every attempt
    started = datetime.now(UTC) - timedelta(seconds=HEARTBEAT_TIMEOUT * 100 - 60)
    stuck = kept_to_the_end(
        record("i-0aaaaaaaaaaaaaaa7", Step.RELEASE_EIP, started + timedelta(minutes=1), started)
    )
    token = adopted_token(stuck.hook)
    stuck = stuck.model_copy(update={"token": token, "id": f"{stuck.instance_id}/terminate/{token}"})
    assert store(stack).create(stuck)
    calls: Counter[str] = Counter()

    def throttled(model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        calls[model.name] += 1
        if model.name != "DescribeAutoScalingInstances":
            return None
        error = {"Code": "Throttling", "Message": "Rate exceeded"}
        return AWSResponse("https://autoscaling", 400, HTTPHeaders(), None), {
            "Error": error,
            "ResponseMetadata": {},
        }

    events = boto3._get_default_session().events
    events.register("before-call.autoscaling.*", throttled, unique_id="tests.ThrottleAsg")  # type: ignore[arg-type]
    try:
        # When the sweep settles it, Then the sweep fails (its alarm)
        with pytest.raises(SweepFailed, match="last-chances"):
            sweeper.handler(load_event("sweeper-schedule.json"), invocation())
    finally:
        events.unregister("before-call.autoscaling.*", unique_id="tests.ThrottleAsg")

    # having looked (and retried the look), and completed nothing
    assert calls["DescribeAutoScalingInstances"] >= 1
    assert calls["CompleteLifecycleAction"] == 0
    # and the lifecycle waits at its completion, with the sweeper's failure result, for the engine's retry
    settling = store(stack).get(stuck.id)
    assert settling is not None
    assert (settling.step, settling.outcome, settling.completed_at) == (
        Step.COMPLETE,
        "settled-by-sweeper",
        None,
    )
    assert settling.action_open
    sent = [json.loads(m["Body"]) for q in (stack.drain_queue, stack.eip_queue) for m in receive_all(q)]
    # (tried twice by the sweep, its first part's settlement again by the lifecycles' part, each leaving the engine a
    # message: the first one's, at the seq before, arrives stale)
    assert sent[-1] == {"record_id": stuck.id, "seq": settling.seq, "step": "complete"}
    assert all(
        (m["record_id"], m["step"]) == (stuck.id, "complete") and m["seq"] <= settling.seq for m in sent
    )
