"""A new instance that EC2's reads do not show for minutes after RunInstances (nodecycle_sandbox.aws.ec2_consistency),
its new address unknown as long: the launch's tries of that address pass the minute after which each asks EC2 and
Auto Scaling where the instance is (0079917). An instance EC2 does not list yet, and no group terminates, is not
gone: the launch goes on to associate the address once EC2 knows both, and is never ended as ``instance-gone``
without one (a live instance without its address, its action completed CONTINUE)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

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
FUNCTION_KEY = "AKIAFUNCTIONEIPRIP2S"  # the eip function's: its reads lag
LAG_SECONDS = 110.0  # past the minute of tries after which each asks where the instance is; within two


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def eip_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    monkeypatch.setenv("NODECYCLE_EIP_FAILURE_POLICY", "abandon")
    return load_function("eip")


def test_a_new_instance_ec2_does_not_list_for_minutes_is_not_taken_for_gone_and_takes_its_address(
    eip_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given EC2 whose reads and calls lag the eip function by almost two minutes, and a new instance launched
    # within them (DescribeInstances does not list it), whose launch allocated its address (unknown as long)
    LAG.arm(LAG_SECONDS, [FUNCTION_KEY], clock)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))
    assert eip_fn.handler(work_event(launch), LambdaContext()).get("batchItemFailures") == []
    assert current(stack, launch).extra["eip"]["allocated"]["unseen"] == 1

    # When the launch runs on, past its minute of tries, each of them then asking where the instance is
    capsys.readouterr()
    started = clock.now
    ended = run_while(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then the instance was never taken for gone: the launch went on past its address with it associated, no EIP
    # failure counted, nothing allocated again
    assert clock.now - started > 60.0, "the tries never reached the looks at the instance"
    assert ended.outcome != "instance-gone"
    assert ended.step is not Step.ASSIGN_EIP
    out = capsys.readouterr().out
    assert "is not gone" not in out
    assert (metric(out, "EipFailures"), metric(out, "EipsAllocated")) == (0, 0)
    (address,) = ours()
    assert address.get("InstanceId") == instance
