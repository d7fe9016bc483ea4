"""Two deliveries of one launch's message running at once, on moto under EC2 that lags
(nodecycle_sandbox.aws.ec2_consistency): the second delivery runs while the first is between its AssociateAddress
and its commit, its reads not showing the first's association yet. The launch ends with one address, associated
once; the other delivery's commit is refused (the record moved on), as the engine makes every duplicate."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.eip.assign import _draw
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    allocate,
    given,
    lagging_clock,
    now,
    run_instances,
    run_while,
    work_event,
)
from tests.support.emf import metric
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPLAG02"  # the eip function's: its reads lag
LAG_SECONDS = 6.0


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch, armed=LAG_SECONDS)


@pytest.fixture
def eip_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    return load_function("eip")


def run(eip_fn: ModuleType, stack: Stack, clock: Clock, record: LifecycleRecord) -> LifecycleRecord:
    """Deliver the record's messages while it assigns its address, each when due (the clock moved on)."""
    return run_while(eip_fn, stack, clock, record, Step.ASSIGN_EIP)


def test_a_second_delivery_of_a_pool_launch_does_not_move_the_first_ones_address_off_the_instance(
    eip_fn: ModuleType,
    stack: Stack,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given a pool of two addresses and an instance, known to EC2 for long; the address first in the instance's
    # order held by an old instance
    clock.now -= 60
    (instance, old) = run_instances(2)
    pool = [allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"}) for _ in range(2)]
    first, other = sorted(pool, key=lambda allocation_id: _draw(instance, allocation_id))
    operator: Any = boto3.client("ec2")
    held = operator.associate_address(AllocationId=first, InstanceId=old, AllowReassociation=False)
    clock.now += 60
    # And the old instance gives it back a second before the launch's first delivery runs: that delivery still
    # sees it held, and takes the other one
    operator.disassociate_address(AssociationId=held["AssociationId"])
    clock.now += 1
    launch = given(stack, launch_record(instance, at=now()))
    # And a second delivery of the launch's message runs as soon as the first has associated an address (its
    # commit not made yet), 5 s later: it sees the first address free by then, not yet the first delivery's
    # association. Every association with the instance is recorded
    associated: list[str] = []
    original = Ec2Addresses.associate
    message = work_event(launch)

    def associate(self: Ec2Addresses, allocation_id: str, instance_id: str) -> str:
        association = original(self, allocation_id, instance_id)
        associated.append(allocation_id)
        if len(associated) == 1:
            clock.now += 5
            second = eip_fn.handler(message, LambdaContext())
            assert second.get("batchItemFailures", []) == []
        return association

    monkeypatch.setattr(Ec2Addresses, "associate", associate)

    # When the first delivery runs (the second within it), then the launch's messages until it goes on
    response = eip_fn.handler(message, LambdaContext())
    assert response.get("batchItemFailures", []) == []
    launched = run(eip_fn, stack, clock, launch)

    # Then one address was associated with the instance, the one the first delivery took (never moved off for
    # another): the one it holds and its record names; the other is free in the pool, which did not grow
    assert launched.step is Step.READY_GATE, launched.outcome
    assert set(associated) == {other} == {launched.allocation_id}
    ours = {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{OWNER_TAG}": OWNER})}
    assert ours == {other: instance, first: None}
    out = capsys.readouterr().out
    assert metric(out, "EipFailures") == 0
