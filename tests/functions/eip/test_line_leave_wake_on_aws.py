"""A launch leaving a pool's line without an address wakes the next one, through the eip function as wired
(nodecycle.wiring.eip: ASSIGN_EIP given the LineWaker), on moto: the wake-up is on the eip queue, and runs."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import (
    addresses,
    allocate,
    current,
    due_now,
    given,
    now,
    run_instances,
    work_event,
)
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack


def wake_ups(stack: Stack, record: LifecycleRecord) -> list[dict[str, Any]]:
    bodies = (json.loads(message["Body"]) for message in receive_all(stack.eip_queue))
    return [body for body in bodies if body.get("wake") and body["record_id"] == record.id]


def test_a_launch_whose_instance_went_while_first_in_line_wakes_the_next_which_then_looks(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of one address held by an old instance, and two launches waiting in its line
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    old, first, second = run_instances(3)
    eip_fn.handler(work_event(given(stack, launch_record(old, at=now()))), LambdaContext())
    ahead = given(stack, launch_record(first, at=now()))
    eip_fn.handler(work_event(ahead), LambdaContext())
    behind = given(stack, launch_record(second, at=now()))
    eip_fn.handler(work_event(behind), LambdaContext())
    assert current(stack, behind).step is Step.ASSIGN_EIP
    assert wake_ups(stack, behind) == []

    # When the first launch's instance is terminated, and its next look finds it gone
    boto3.client("ec2").terminate_instances(InstanceIds=[first])
    eip_fn.handler(work_event(due_now(stack, ahead)), LambdaContext())
    assert current(stack, ahead).outcome == "instance-gone"

    # Then the second launch is sent its look at once, which runs (the address still the old instance's)
    (wake,) = wake_ups(stack, behind)
    seq = current(stack, behind).seq
    response = eip_fn.handler(sqs_event(wake), LambdaContext())
    assert response.get("batchItemFailures", []) == []
    assert current(stack, behind).seq > seq
    (address,) = [a for a in addresses(**{f"tag:{POOL_TAG}": "ci"}) if a["AllocationId"] == pooled]
    assert address.get("InstanceId") == old
