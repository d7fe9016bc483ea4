"""A launch whose new address EC2 does not know yet (its reads and calls lag: nodecycle_sandbox.aws.ec2_consistency)
while a user terminates its instance and the instance's release frees the address: AssociateAddress answers for
the address (``InvalidAllocationID.NotFound``), never for the instance, and the launch, taking an address EC2 has
never shown for one it does not know yet, tried it for its whole wait (ten minutes), then counted an EIP failure and
met its failure policy. It ends as ``instance-gone`` once its tries of a minute are over."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from nodecycle.domain.model import Step
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import (
    Clock,
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
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPREIP3"  # the eip function's: its reads lag


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def eip_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    monkeypatch.setenv("NODECYCLE_EIP_FAILURE_POLICY", "abandon")
    return load_function("eip")


def test_the_sandbox_answers_an_association_of_an_address_gone_with_a_terminated_instance_for_the_address(
    clock: Clock,
) -> None:
    # Given an address released, and an instance terminated
    ec2: Any = boto3.client("ec2")
    (instance,) = run_instances(1)
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.release_address(AllocationId=allocation)
    ec2.terminate_instances(InstanceIds=[instance])

    # When the one is associated with the other, Then EC2 answers for the address
    with pytest.raises(ClientError) as refused:
        ec2.associate_address(AllocationId=allocation, InstanceId=instance, AllowReassociation=False)
    assert refused.value.response["Error"]["Code"] == "InvalidAllocationID.NotFound"


def test_a_launch_whose_unknown_address_is_freed_as_its_instance_is_terminated_ends_as_gone_within_minutes(
    eip_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given EC2 whose reads and calls lag the eip function's writes by 20 s, and a launch whose first run allocated
    # its address, which EC2 does not know yet to its association
    LAG.arm(20.0, [FUNCTION_KEY], clock)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))
    assert eip_fn.handler(work_event(launch), LambdaContext()).get("batchItemFailures") == []
    (address,) = ours()
    assert "InstanceId" not in address
    assert current(stack, launch).extra["eip"]["allocated"]["unseen"] == 1

    # When a user terminates the instance and its release frees the address, and the launch runs on
    ec2: Any = boto3.client("ec2")
    ec2.terminate_instances(InstanceIds=[instance])
    ec2.release_address(AllocationId=address["AllocationId"])
    capsys.readouterr()
    started = clock.now
    ended = run_while(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then it ends past its completion as gone within a few minutes (not its ten-minute wait, nor by its failure
    # policy), no EIP failure counted, nothing allocated again: no address left
    assert (ended.step, ended.outcome) == (Step.DONE, "instance-gone")
    assert clock.now - started <= 180, clock.now - started
    out = capsys.readouterr().out
    assert (metric(out, "EipFailures"), metric(out, "EipsAllocated")) == (0, 0)
    assert ours() == []
