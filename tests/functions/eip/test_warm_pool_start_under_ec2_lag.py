"""A release after its action's completion (settled near its global timeout) whose message runs seconds after a
scale-out took the instance out of its warm pool again, on moto under EC2 that lags
(nodecycle_sandbox.aws.ec2_consistency): EC2's reads show the start late, its LaunchTime with its state, so the
release sees the instance stopped, launched before the completion. The instance in service keeps its address."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG
from nodecycle_sandbox.aws.ec2_consistency import LAG, alternating
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    allocate,
    given,
    lagging_clock,
    now,
    run_instances,
    run_while,
)
from tests.support.emf import metric
from tests.support.functions import load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPLAG05"  # the eip function's: its reads lag
LAG_SECONDS = 6.0


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch, armed=LAG_SECONDS)


@pytest.fixture
def allocating_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


run = run_while


def test_a_late_release_seconds_after_a_warm_pool_start_keeps_the_address_of_the_instance_in_service(
    allocating_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    a_late_release_seconds_after_a_warm_pool_start(allocating_fn, stack, clock, capsys)


def test_a_late_release_under_reads_that_go_back_and_forth_keeps_the_address_of_the_instance_in_service(
    allocating_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # (EC2's reads answered stale and fresh in turn, the release's look at the instance first: stale)
    LAG.arm(LAG_SECONDS, [FUNCTION_KEY], clock, fresh=alternating(first_fresh=False))
    a_late_release_seconds_after_a_warm_pool_start(allocating_fn, stack, clock, capsys)


def test_a_late_release_whose_looks_at_the_instance_are_stale_and_at_the_address_fresh_keeps_it(
    allocating_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # (EC2's first two reads answered by a replica behind, the release's looks at the instance among them; every
    # later one, its looks at the address just disassociated among them, by the replica with every write)
    LAG.arm(LAG_SECONDS, [FUNCTION_KEY], clock, fresh=replicas(False, False))
    a_late_release_seconds_after_a_warm_pool_start(allocating_fn, stack, clock, capsys)


def test_a_late_release_that_sees_the_start_at_its_second_run_gives_the_address_back_whatever_a_read_shows(
    allocating_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # (the first run's reads stale: the address disassociated, the instance seen down; the second run's look at
    # the instance fresh, showing the start, and its next read of the address stale, showing it still associated
    # as before the disassociation)
    LAG.arm(LAG_SECONDS, [FUNCTION_KEY], clock, fresh=replicas(False, False, False, False, True, False))
    a_late_release_seconds_after_a_warm_pool_start(allocating_fn, stack, clock, capsys)


def replicas(*fresh: bool) -> Callable[[], bool]:
    """A ``fresh`` for LAG.arm: the lagging reads answered fresh or stale as ``fresh`` says, then every one fresh."""
    answers = itertools.chain(fresh, itertools.repeat(True))
    return lambda: next(answers)


def a_late_release_seconds_after_a_warm_pool_start(
    allocating_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance launched long ago with the address allocated for it, stopped into its warm pool by a
    # lifecycle whose action was completed first (near its global timeout), its RELEASE_EIP still to run
    clock.now -= 600
    (instance,) = run_instances(1)
    stamp = (now() - timedelta(minutes=10)).isoformat(timespec="seconds")
    held = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: instance, ALLOCATED_AT_TAG: stamp})
    operator: Any = boto3.client("ec2")
    operator.associate_address(AllocationId=held, InstanceId=instance, AllowReassociation=False)
    operator.stop_instances(InstanceIds=[instance])
    clock.now += 600
    # (LaunchTime has whole seconds: the launch's before the completion, the start's after it)
    time.sleep(1.1)
    completed = now()
    time.sleep(1.1)
    release = given(
        stack,
        terminate_record(
            instance,
            at=now() - timedelta(minutes=5),
            step=Step.RELEASE_EIP,
            completed_at=completed,
            outcome="CONTINUE",
        ),
    )

    # When a scale-out takes it out of the warm pool again, and the late release runs a second later, while
    # EC2's reads still show it stopped, with its old LaunchTime
    operator.start_instances(InstanceIds=[instance])
    clock.now += 1
    run(allocating_fn, stack, clock, release, Step.RELEASE_EIP)

    # Then the instance, in service again, still holds its address: nothing released
    assert [a["AllocationId"] for a in addresses(**{f"tag:{OWNER_TAG}": OWNER})] == [held]
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert address.get("InstanceId") == instance
    assert metric(capsys.readouterr().out, "EipsReleased") == 0
    assert f"describe_instances {instance}" in LAG.lagged
