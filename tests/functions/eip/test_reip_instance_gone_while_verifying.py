"""The eip function on moto under EC2 that lags (nodecycle_sandbox.aws.ec2_consistency): a launch whose instance a
user terminates while the step verifies its new address, EC2's reads not showing the association yet, and whose
address the instance's release then frees. The association never shows: the launch ends as ``instance-gone``,
counting no EIP failure and allocating nothing more for an instance that is gone."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import (
    Clock,
    current,
    due_now,
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
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPREIP1"  # the eip function's: its reads lag
LAG_SECONDS = 20.0


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def eip_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


def test_a_launch_whose_instance_is_terminated_and_its_address_released_as_it_verifies_ends_as_gone(
    eip_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given EC2 whose reads lag the eip function's writes, and a launch run until it associated its new address,
    # the association not shown to it yet
    LAG.arm(LAG_SECONDS, [FUNCTION_KEY], clock)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))
    for _ in range(20):
        if any(a.get("InstanceId") == instance for a in ours()):
            break
        stored = current(stack, launch)
        clock.now += (stored.due_at - stored.updated_at).total_seconds() if stored.due_at else 0.0
        assert (
            eip_fn.handler(work_event(due_now(stack, stored)), LambdaContext()).get("batchItemFailures") == []
        )
    (address,) = ours()
    assert address.get("InstanceId") == instance
    verifying = current(stack, launch)
    assert verifying.step is Step.ASSIGN_EIP
    assert "verify" in verifying.extra["eip"]

    # When a user terminates the instance (EC2 disassociates its address) and its release frees the address
    ec2: Any = boto3.client("ec2")
    ec2.terminate_instances(InstanceIds=[instance])
    ec2.release_address(AllocationId=address["AllocationId"])
    capsys.readouterr()
    ended = run_while(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then the launch ends past its completion as gone, no EIP failure counted (the alarm pages for a live
    # instance without its address), and nothing more was allocated for the instance gone: no address left
    assert (ended.step, ended.outcome) == (Step.DONE, "instance-gone")
    out = capsys.readouterr().out
    assert (metric(out, "EipFailures"), metric(out, "EipsAllocated")) == (0, 0)
    assert ours() == []
