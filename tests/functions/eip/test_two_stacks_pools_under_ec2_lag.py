"""Two stacks on one account, each with a pool of the same name, on moto under EC2 that lags
(nodecycle_sandbox.aws.ec2_consistency, whose own tag filters judge the lagged state): a launch claims only an
address of its own owner's pool, whatever the other stack's pool has free (invariant 3); a pool's address whose
pool tag an operator removed is no longer claimed."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from nodecycle_sandbox.aws.ec2_consistency import LAG, alternating
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    allocate,
    current,
    given,
    lagging_clock,
    now,
    run_instances,
    work_event,
)
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
OTHER = "stack-b"
FUNCTION_KEY = "AKIAFUNCTIONEIPLAG13"  # the eip function's: its reads lag


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def pool_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    return load_function("eip")


def holder(allocation_id: str) -> Any:
    (address,) = [a for a in addresses() if a["AllocationId"] == allocation_id]
    return address.get("InstanceId")


def test_a_launch_whose_pool_is_used_up_waits_and_takes_nothing_of_the_other_stacks_pool_of_that_name(
    pool_fn: ModuleType, stack: Stack, clock: Clock
) -> None:
    # Given this stack's pool "ci" of one address, held by an old instance; the other stack's pool "ci" with one
    # address free, allocated moments ago (EC2's reads going back and forth about it); and an untagged address
    old, launching = run_instances(2)
    ours = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    pool_fn.handler(work_event(given(stack, launch_record(old, at=now()))), LambdaContext())
    assert holder(ours) == old
    LAG.arm(6.0, [FUNCTION_KEY], clock, fresh=alternating())
    theirs = allocate(**{OWNER_TAG: OTHER, POOL_TAG: "ci"})
    untagged = allocate()

    # When a launch of this stack runs (its looks at the pool, fresh and stale)
    launch = given(stack, launch_record(launching, at=now()))
    for _ in range(3):
        pool_fn.handler(work_event(current(stack, launch)), LambdaContext())
        clock.now += 15

    # Then it waits in its pool's line: the other stack's address and the untagged one are free, untouched
    assert current(stack, launch).step is Step.ASSIGN_EIP
    assert (holder(theirs), holder(untagged), holder(ours)) == (None, None, old)


def test_a_pool_address_whose_pool_tag_was_removed_by_hand_is_not_claimed(
    pool_fn: ModuleType, stack: Stack
) -> None:
    # Given this stack's pool of one address, whose pool tag an operator removed (the owner tag kept)
    (launching,) = run_instances(1)
    retired = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    boto3.client("ec2").delete_tags(Resources=[retired], Tags=[{"Key": POOL_TAG}])

    # When a launch runs
    launch = given(stack, launch_record(launching, at=now()))
    pool_fn.handler(work_event(launch), LambdaContext())

    # Then the address is not claimed: the launch waits in its pool's line
    assert current(stack, launch).step is Step.ASSIGN_EIP
    assert holder(retired) is None
