"""A pool launch of a new instance EC2 does not know for minutes after RunInstances (nodecycle_sandbox.aws.
ec2_consistency; EC2's guide, "Eventual consistency in the Amazon EC2 API", has a caller back off "up to a few
minutes" before it believes an ``InvalidInstanceID.NotFound`` of an instance just launched): its pool addresses are
old, so AssociateAddress answers for the instance, ``InvalidInstanceID.NotFound``, and DescribeInstances does not
list it. Such an instance is neither gone nor pending: the launch waits for it (its EipWaitSeconds, as for an
address EC2 does not know yet) and takes its address once EC2 knows it, rather than failing after the two minutes
a pending instance is given (an EIP failure, the alarm, and the failure policy for a live instance)."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

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
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
POOL = "ci"
FUNCTION_KEY = "AKIAFUNCTIONEIPRIP2P"  # the eip function's: its reads lag
LAG_SECONDS = 180.0  # three minutes: within EC2's "few minutes", past the two a pending instance is given


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def pool_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return pool_function(monkeypatch, POOL)


def test_a_pool_launch_of_an_instance_ec2_does_not_know_for_minutes_takes_its_address_once_known(
    pool_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a pool address EC2 has shown for long, and a new instance launched as EC2 starts lagging by three
    # minutes (it answers InvalidInstanceID.NotFound for it, and does not list it)
    (pooled,) = [allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL})]
    LAG.arm(LAG_SECONDS, [FUNCTION_KEY], clock)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))

    # When its launch runs, each try when due
    started = clock.now
    ended = run_while(pool_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then it takes the pool address once EC2 knows the instance: no EIP failure, no failure policy
    out = capsys.readouterr().out
    assert (ended.step, ended.outcome, ended.allocation_id) == (Step.READY_GATE, None, pooled), ended.outcome
    assert clock.now - started >= LAG_SECONDS
    assert metric(out, "EipFailures") == 0
    assert [a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": POOL})] == [instance]
