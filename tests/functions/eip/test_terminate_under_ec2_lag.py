"""A terminate that runs while EC2's reads do not show its instance's address yet, on moto under EC2 that lags
(nodecycle_sandbox.aws.ec2_consistency): a scale-in right after the scale-out, the launch's association made
seconds before the terminate's RELEASE_EIP lists the instance's addresses. The release finds nothing to take
back; EC2 itself disassociates the address when the instance terminates. Nothing is left behind: a pool's
address is free in its pool, tagged as before, once the window is over and the launch has ended."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
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
    run_instances,
    run_while,
    work_event,
)
from tests.support.emf import metric
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record, state_change_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPLAG03"  # the eip function's: its reads lag
LAG_SECONDS = 6.0


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch, armed=LAG_SECONDS)


@pytest.fixture
def eip_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    return load_function("eip")


@pytest.fixture
def allocating_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


run = run_while


def test_a_terminate_that_does_not_see_the_pool_address_just_claimed_leaves_it_free_in_its_pool(
    eip_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a pool of one address and an instance, known to EC2 for long, and the instance's launch that has
    # just associated the address (EC2 does not show it yet: the launch verifies it again shortly)
    clock.now -= 60
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    (instance,) = run_instances(1)
    clock.now += 60
    launch = given(stack, launch_record(instance, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    assert "verify" in current(stack, launch).extra["eip"]
    assert addresses(**{f"tag:{POOL_TAG}": "ci"})[0].get("InstanceId") == instance

    # When the instance is terminated a second later (a scale-in), its terminate's RELEASE_EIP and COMPLETE run
    # at once, and then Auto Scaling terminates it
    clock.now += 1
    terminate = given(stack, terminate_record(instance, at=now()))
    over = run(eip_fn, stack, clock, terminate, Step.RELEASE_EIP, Step.COMPLETE)
    assert over.completed_at is not None
    operator: Any = boto3.client("ec2")
    operator.terminate_instances(InstanceIds=[instance])
    # And the launch's messages run until it ends
    ended = run(eip_fn, stack, clock, launch, Step.ASSIGN_EIP, Step.READY_GATE)

    # Then the address is free in its pool, tagged as it was (no instance's tag), never released; the launch
    # ended with its instance gone, and no EIP failure was counted
    (address,) = addresses(**{f"tag:{POOL_TAG}": "ci"})
    assert address["AllocationId"] == pooled
    assert "InstanceId" not in address
    assert {tag["Key"]: tag["Value"] for tag in address["Tags"]} == {OWNER_TAG: OWNER, POOL_TAG: "ci"}
    assert ended.step is not Step.ASSIGN_EIP, ended
    out = capsys.readouterr().out
    assert (metric(out, "EipsReleased"), metric(out, "EipFailures")) == (0, 0)


def test_a_stop_whose_release_runs_before_ec2_shows_the_instance_stopped_takes_its_address_back(
    allocating_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance running for long with the address allocated for it at its launch
    clock.now -= 600
    (instance,) = run_instances(1)
    stamp = (now() - timedelta(minutes=10)).isoformat(timespec="seconds")
    held = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: instance, ALLOCATED_AT_TAG: stamp})
    operator: Any = boto3.client("ec2")
    operator.associate_address(AllocationId=held, InstanceId=instance, AllowReassociation=False)
    clock.now += 600

    # When it is stopped outside the group's hooks, and the stop's RELEASE_EIP runs a second later, while EC2's
    # reads still show it running
    operator.stop_instances(InstanceIds=[instance])
    clock.now += 1
    # (EC2 tells the stop's time in whole seconds, as the launch's: the stop comes seconds after the launch)
    stop = given(stack, state_change_record(instance, at=now() + timedelta(seconds=2)))
    over = run(allocating_fn, stack, clock, stop, Step.RELEASE_EIP)

    # Then its address is released (the instance is down: not one started again since its stop)
    assert over.step is Step.DONE
    assert addresses(**{f"tag:{OWNER_TAG}": OWNER}) == []
    assert metric(capsys.readouterr().out, "EipsReleased") == 1
    assert f"describe_instances {instance}" in LAG.lagged
