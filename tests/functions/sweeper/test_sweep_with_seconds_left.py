"""A sweep invoked with 5 s left, on moto (a schedule so late that the invocation began near its end is not how
Lambda starts one, but a clock set far ahead reads so; and it is what a sweep's last seconds look like to a part
that would start then): too little for any part's reserve, and below what the invocation's deadline for its
calls is kept for (wiring/common.py: MIN_RUN_SECONDS), so a call started now would have no end of its own. No
part starts, no AWS call is made, and the sweep says it was cut short (its metric flushed)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.functions.sweeper.test_sweeper_function import record, store
from tests.support.emf import metric
from tests.support.events import load_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all


def test_a_sweep_with_five_seconds_left_makes_no_call_and_says_it_was_cut_short(
    sweeper: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a lifecycle whose message was lost and an address of this stack left unassociated for an hour
    now = datetime.now(UTC)
    lost = record(
        "i-0aaaaaaaaaaaaaaa9", Step.RELEASE_EIP, now - timedelta(minutes=5), now - timedelta(minutes=6)
    )
    assert store(stack).create(lost)
    tags: list[Any] = [
        {"Key": "nodecycle:owner", "Value": "stack-a"},
        {"Key": "nodecycle:allocated-at", "Value": (now - timedelta(hours=1)).isoformat()},
    ]
    ec2 = boto3.client("ec2")
    dangling = ec2.allocate_address(
        Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}]
    )["AllocationId"]
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    events = boto3._get_default_session().events  # the adapters' clients are made from it
    events.register("before-call", count, unique_id="tests.CountCalls")
    try:
        # When the scheduled sweep runs with 5 s left, Then it fails for want of time
        with pytest.raises(SweepFailed, match="want of time"):
            sweeper.handler(load_event("sweeper-schedule.json"), LambdaContext(remaining_millis=5_000))
    finally:
        events.unregister("before-call", unique_id="tests.CountCalls")

    # having made no call: the lost message not sent, the address not released
    assert calls == Counter()
    assert receive_all(stack.eip_queue) == []
    assert dangling in {a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]}
    # and its metrics, flushed, tell of it
    assert metric(capsys.readouterr().out, "SweepsCutShort") == 1
