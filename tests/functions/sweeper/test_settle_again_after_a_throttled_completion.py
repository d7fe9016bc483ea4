"""The sweeper function on moto: a stalled action at its last chance whose CompleteLifecycleAction Auto Scaling
throttles past botocore's retries ("Throttling", "Rate exceeded") is settled again by the lifecycles' part of the same
sweep, through the real adapters: the next sweep would come after its global timeout, and its own queue, stalled,
runs no engine retry."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from nodecycle.domain.model import Step
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.functions.intake.conftest import HEARTBEAT_TIMEOUT
from tests.functions.sweeper.test_sweeper_function import invocation, kept_to_the_end, record, store
from tests.support.events import load_event
from tests.support.stack import Stack


def test_a_settlement_throttled_past_the_retries_is_made_again_in_the_same_sweep(
    sweeper: ModuleType, stack: Stack
) -> None:
    # Given a stalled lifecycle 300 s before its action's global timeout (past the settlement point, 420 s; the next
    # sweep comes after it), and Auto Scaling throttling its first CompleteLifecycleAction past the client's retries
    started = datetime.now(UTC) - timedelta(seconds=HEARTBEAT_TIMEOUT * 100 - 300)
    stuck = kept_to_the_end(
        record("i-0aaaaaaaaaaaaaac1", Step.RELEASE_EIP, started + timedelta(minutes=1), started)
    )
    assert store(stack).create(stuck)
    calls: Counter[str] = Counter()

    def throttled_once(model: Any, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        calls[model.name] += 1
        if model.name != "CompleteLifecycleAction" or calls[model.name] > 1:
            return None
        error = {"Code": "Throttling", "Message": "Rate exceeded"}
        return AWSResponse("https://autoscaling", 400, HTTPHeaders(), None), {
            "Error": error,
            "ResponseMetadata": {},
        }

    events = boto3._get_default_session().events  # the adapters' clients are made from it
    events.register("before-call.autoscaling.*", throttled_once, unique_id="tests.ThrottleOnce")  # type: ignore[arg-type]
    try:
        # When the scheduled sweep runs, Then it fails (the throttled call: its alarm)
        with pytest.raises(SweepFailed, match="last-chances"):
            sweeper.handler(load_event("sweeper-schedule.json"), invocation())
    finally:
        events.unregister("before-call.autoscaling.*", unique_id="tests.ThrottleOnce")

    # but it completed the action again, and the lifecycle is settled (before: one call, the lifecycle left at its
    # completion for an engine retry that a stalled queue never runs, and a next sweep after the global timeout)
    assert calls["CompleteLifecycleAction"] == 2
    settled = store(stack).get(stuck.id)
    assert settled is not None
    assert settled.outcome == "settled-by-sweeper"
    assert settled.completed_at is not None
    assert settled.completed_at < stuck.global_deadline
