"""The eip function's flows on moto under EC2 that lags (sandbox/nodecycle_sandbox/aws/ec2_consistency.py): for a
window after each write, the function's reads see the state before it, and its calls naming an id created within
the window answer that id's NotFound code (a new address, a new association, the instance just launched).

The window runs on a clock of the test's: each delivery of a step comes when the step asked for it (the clock moved
on by its delay), without the test sleeping. The test's own reads (another caller) see EC2's latest state."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG, POOL_TAG
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    allocate,
    current,
    given,
    lagging_clock,
    now,
    ours,
    run_instances,
    run_while,
    work_event,
)
from tests.support.emf import metric
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPLAG00"  # the eip function's: its reads lag
LAGS = [1.0, 6.0, 20.0]  # seconds: usually under one, seconds under load


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The lag's clock; the eip function's EC2 client signs with FUNCTION_KEY (armed by each test)."""
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def eip_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


def lag(clock: Clock, seconds: float) -> None:
    LAG.arm(seconds, [FUNCTION_KEY], clock)


run = run_while


@pytest.mark.parametrize("seconds", LAGS)
def test_a_launch_allocating_an_address_under_lag_holds_one_and_its_terminate_releases_it(
    eip_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str], seconds: float
) -> None:
    # Given EC2 whose reads lag its writes, and an instance just launched
    lag(clock, seconds)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))

    # When its launch runs until it goes on
    launched = run(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then the instance holds one address, the one recorded, allocated once, and no failure was counted
    assert launched.step is Step.READY_GATE
    (address,) = ours()
    assert (address.get("InstanceId"), launched.allocation_id) == (instance, address["AllocationId"])
    out = capsys.readouterr().out
    assert (metric(out, "EipsAllocated"), metric(out, "EipFailures")) == (1, 0)
    assert any(met.startswith(("associate_address", "describe_")) for met in LAG.lagged)

    # And when its terminate runs at once (the association still within the window), the address is
    # disassociated and released, once
    terminate = given(stack, terminate_record(instance, at=now()))
    over = run(eip_fn, stack, clock, terminate, Step.RELEASE_EIP, Step.COMPLETE)
    assert ours() == []
    assert over.completed_at is not None
    out = capsys.readouterr().out
    assert (metric(out, "EipsReleased"), metric(out, "EipFailures")) == (1, 0)


@pytest.mark.parametrize("seconds", LAGS)
def test_a_launch_claiming_from_the_pool_under_lag_takes_one_and_its_terminate_gives_it_back(
    eip_fn: ModuleType,
    stack: Stack,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    seconds: float,
) -> None:
    # Given a pool of two free addresses (known to EC2 for long), EC2 whose reads lag, and an instance just
    # launched
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pool = {allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"}) for _ in range(2)}
    lag(clock, seconds)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))

    # When its launch runs until it goes on
    launched = run(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then it holds one of the pool's, recorded; the pool did not grow; no failure was counted
    assert launched.step is Step.READY_GATE
    held = {a["AllocationId"] for a in ours() if a.get("InstanceId") == instance}
    assert held == {launched.allocation_id}
    assert held <= pool
    assert {a["AllocationId"] for a in ours()} == pool
    out = capsys.readouterr().out
    assert (metric(out, "EipsClaimed"), metric(out, "EipFailures")) == (1, 0)

    # And its terminate, at once, gives it back to the pool, free, never released
    terminate = given(stack, terminate_record(instance, at=now()))
    run(eip_fn, stack, clock, terminate, Step.RELEASE_EIP, Step.COMPLETE)
    assert {a["AllocationId"]: a.get("InstanceId") for a in ours()} == dict.fromkeys(pool)
    out = capsys.readouterr().out
    assert (metric(out, "EipsReturned"), metric(out, "EipsReleased"), metric(out, "EipFailures")) == (1, 0, 0)


@pytest.mark.parametrize("seconds", LAGS)
def test_a_launch_growing_an_empty_pool_under_lag_grows_it_by_one(
    eip_fn: ModuleType,
    stack: Stack,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    seconds: float,
) -> None:
    # Given an empty pool that grows when empty, EC2 whose reads lag, and an instance just launched
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_ALLOCATE_WHEN_EMPTY", "true")
    lag(clock, seconds)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))

    # When its launch runs until it goes on
    launched = run(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then the pool grew by one address, which the instance holds; no failure was counted
    assert launched.step is Step.READY_GATE
    (address,) = ours()
    assert (address.get("InstanceId"), launched.allocation_id) == (instance, address["AllocationId"])
    out = capsys.readouterr().out
    assert (metric(out, "EipsAllocated"), metric(out, "EipFailures")) == (1, 0)


def test_a_spare_allocated_moments_ago_for_the_instance_is_released_not_taken_for_gone(
    eip_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance holding the address its launch allocated, known for long, and a spare allocated for it
    # moments ago by a concurrent delivery of the launch (unknown to the function's EC2 for the window)
    lag(clock, 3.0)
    clock.now -= 60
    (instance,) = run_instances(1)
    stamp = now().isoformat(timespec="seconds")
    tags = {OWNER_TAG: OWNER, INSTANCE_TAG: instance, ALLOCATED_AT_TAG: stamp}
    kept = allocate(**tags)
    boto3.client("ec2").associate_address(AllocationId=kept, InstanceId=instance, AllowReassociation=False)
    clock.now += 60
    spare = boto3.client(
        "ec2", aws_access_key_id=FUNCTION_KEY, aws_secret_access_key="testing"
    ).allocate_address(
        Domain="vpc",
        TagSpecifications=[
            {"ResourceType": "elastic-ip", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["AllocationId"]
    launch = given(stack, launch_record(instance, at=now()))

    # When a delivery of the launch runs
    launched = run(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then the instance keeps its address and goes on; the spare is left (not known yet) or released, never
    # counted released while it is still there
    assert launched.allocation_id == kept
    out = capsys.readouterr().out
    left = {a["AllocationId"] for a in ours()}
    assert metric(out, "EipsReleased") == (0 if spare in left else 1)


def test_a_launch_waiting_first_in_line_whose_instance_ec2_does_not_list_yet_keeps_its_place(
    eip_fn: ModuleType, stack: Stack, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of one address, held for long by an old instance, and an instance launched long ago
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    lag(clock, 5.0)
    clock.now -= 60
    old, later = run_instances(2)
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    operator: Any = boto3.client("ec2")
    association = operator.associate_address(AllocationId=pooled, InstanceId=old, AllowReassociation=False)
    clock.now += 60
    # And the old instance gives the address back, then an instance is launched whose launch finds the pool
    # empty (EC2 does not show the address free yet) and waits first in line
    operator.disassociate_address(AssociationId=association["AssociationId"])
    clock.now += 1
    (first,) = run_instances(1)
    waiting = given(stack, launch_record(first, at=now()))
    eip_fn.handler(work_event(waiting), LambdaContext())
    assert current(stack, waiting).extra["eip"].get("exhausted_since")

    # When a later launch looks once EC2 shows the address free, but not yet the first one's instance
    clock.now += 4.5
    late = given(stack, launch_record(later, at=now()))
    eip_fn.handler(work_event(late), LambdaContext())

    # Then it yields the address to the first in line (whose instance EC2 does not list yet: not gone)
    assert addresses(**{f"tag:{POOL_TAG}": "ci"})[0].get("InstanceId") is None
    assert current(stack, late).step is Step.ASSIGN_EIP
    assert any(met.startswith("describe_instances") for met in LAG.lagged), LAG.lagged


@pytest.mark.parametrize("mode", ["allocate", "pool"])
def test_a_launch_whose_new_address_ec2_does_not_know_for_minutes_allocates_no_second_one(
    eip_fn: ModuleType,
    stack: Stack,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    # Given EC2 whose reads lag its writes by a minute and a half, far longer than usual, in allocate mode or
    # with an empty pool that grows when empty, and an instance running for long
    if mode == "pool":
        monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
        monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
        monkeypatch.setenv("NODECYCLE_EIP_POOL_ALLOCATE_WHEN_EMPTY", "true")
    lag(clock, 90.0)
    clock.now -= 200
    (instance,) = run_instances(1)
    clock.now += 200
    launch = given(stack, launch_record(instance, at=now()))

    # When its launch runs until it goes on (each try of the new address answered InvalidAllocationID.NotFound for
    # the window)
    launched = run(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then it allocated one address, which the instance holds: none was taken for released and another allocated
    assert launched.step is Step.READY_GATE, launched.outcome
    (address,) = ours()
    assert (address.get("InstanceId"), launched.allocation_id) == (instance, address["AllocationId"])
    out = capsys.readouterr().out
    assert metric(out, "EipsAllocated") == 1
    assert any(met.startswith("associate_address eipalloc-") for met in LAG.lagged), LAG.lagged
