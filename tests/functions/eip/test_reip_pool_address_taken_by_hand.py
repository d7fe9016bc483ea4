"""A pool address an operator associates by hand with an instance of their own (not nodecycle's) while a launch
claims from the pool, on moto under EC2 that lags (nodecycle_sandbox.aws.ec2_consistency): the launch's listing
still shows the address free, and tags are no lock. What makes the claim exclusive is EC2's own AssociateAddress,
``AllowReassociation=False``, decided on EC2's state: the launch is refused that address, takes another, and
moves nothing; its terminate gives back its own address only."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    allocate,
    given,
    lagging_clock,
    now,
    pool_function,
    run_instances,
    run_while,
)
from tests.support.emf import metric
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack
POOL = "ci"
FUNCTION_KEY = "AKIAFUNCTIONEIPREIP2"  # the eip function's: its reads lag


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def pool_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return pool_function(monkeypatch, POOL)


def holders() -> dict[str, str | None]:
    return {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": POOL})}


def test_a_pool_address_an_operator_takes_by_hand_as_a_launch_claims_it_stays_theirs(
    pool_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a pool of two free addresses (EC2 has shown them for long), an instance of the operator's own, and a
    # launch whose instance would try the first address first
    pool = [allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL}) for _ in range(2)]
    theirs, launching = run_instances(2)
    first, other = sorted(pool, key=lambda a: hashlib.sha256(f"{launching}/{a}".encode()).hexdigest())
    LAG.arm(6.0, [FUNCTION_KEY], clock)

    # When the operator associates that address with their instance by hand, and the launch runs at once (its
    # listing, behind EC2's writes, still shows the address free)
    operator: Any = boto3.client("ec2")
    operator.associate_address(AllocationId=first, InstanceId=theirs, AllowReassociation=False)
    launch = given(stack, launch_record(launching, at=now()))
    launched = run_while(pool_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then the launch was refused the operator's address and holds the other; the operator's is where they put it
    assert launched.step is Step.READY_GATE
    assert launched.allocation_id == other
    assert holders() == {first: theirs, other: launching}
    out = capsys.readouterr().out
    # (refused as associated while EC2's reads still showed the address free: the claim was EC2's to decide)
    assert "is associated, EC2 does not show with what yet" in out
    assert (metric(out, "EipsClaimed"), metric(out, "EipFailures")) == (1, 0)

    # And the launch's terminate gives back its own address only
    terminate = given(stack, terminate_record(launching, at=now()))
    run_while(pool_fn, stack, clock, terminate, Step.RELEASE_EIP)
    assert holders() == {first: theirs, other: None}
