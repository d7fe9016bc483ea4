"""An address given back to its pool wakes the first launch in line at once, before EC2's reads show it
disassociated (DescribeAddresses lags DisassociateAddress: EC2 is eventually consistent). The woken look then
finds it still on the instance that gave it back, and takes it all the same, offered to it by the release
(nodecycle.domain.eip.wake): AssociateAddress decides on EC2's own state, and takes nothing from anyone
(invariant 4): none but with AllowReassociation false. On moto, through the eip function, with
tests/functions/eip/conftest.py's AwsLikeEc2 lagging the disassociation."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import (
    AwsLikeEc2,
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
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


def holder(allocation_id: str) -> str | None:
    (address,) = [a for a in addresses(**{f"tag:{POOL_TAG}": "ci"}) if a["AllocationId"] == allocation_id]
    return address.get("InstanceId")


def wake_ups(stack: Stack, record: LifecycleRecord) -> list[dict[str, Any]]:
    bodies = (json.loads(message["Body"]) for message in receive_all(stack.eip_queue))
    return [body for body in bodies if body.get("wake") and body["record_id"] == record.id]


def test_a_wake_up_that_comes_before_ec2_shows_the_address_free_takes_it_offered_and_steals_nothing(
    eip_fn: ModuleType, ec2: AwsLikeEc2, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of one address held by an old instance, and a launch waiting first in line for it
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    old, waiting = run_instances(2)
    eip_fn.handler(work_event(given(stack, launch_record(old, at=now()))), LambdaContext())
    assert holder(pooled) == old
    launch = given(stack, launch_record(waiting, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    assert current(stack, launch).step is Step.ASSIGN_EIP
    associations = len(ec2.associations)

    # When the old instance's terminate gives the address back, EC2's next read still showing it on the old
    # instance, and the wake-up it sends runs at once
    ec2.stale = 1
    calls: list[dict[str, Any]] = []
    associate = ec2.associate_address

    def recorded(**kwargs: Any) -> Any:
        calls.append(kwargs)
        return associate(**kwargs)

    monkeypatch.setattr(ec2, "associate_address", recorded)
    eip_fn.handler(work_event(given(stack, terminate_record(old, at=now()))), LambdaContext())
    (wake,) = wake_ups(stack, launch)
    eip_fn.handler(sqs_event(wake), LambdaContext())

    # Then the woken look takes the address offered to it at once, though its listing still shows it on the old
    # instance: EC2's AssociateAddress decides on its own state (free), and moves nothing (AllowReassociation
    # false); the launch goes on once a read shows the association (the one showing the old association is behind)
    assert holder(pooled) == waiting
    assert [(call["AllocationId"], call["InstanceId"]) for call in calls] == [(pooled, waiting)]
    assert ec2.associations[associations:] == [(pooled, waiting)]
    for _ in range(3):
        if current(stack, launch).step is not Step.ASSIGN_EIP:
            break
        eip_fn.handler(work_event(due_now(stack, launch)), LambdaContext())
    assert holder(pooled) == waiting
    assert current(stack, launch).step is not Step.ASSIGN_EIP
    assert [call["AllowReassociation"] for call in calls] == [False]
