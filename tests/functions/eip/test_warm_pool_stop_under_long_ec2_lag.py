"""A scale-in into a warm pool minutes after the scale-out, on moto under EC2 whose reads lag its writes by minutes
and go back and forth (nodecycle_sandbox.aws.ec2_consistency): the release's DisassociateAddress of the pool address
the launch claimed is answered as unknown (EC2's writes do not know the association yet) while a read shows it on
the instance. A stopped instance keeps its addresses, and the sweeper never takes one from an instance that is not
gone: a release that gave up would leave the pool's address on the stopped instance for as long as it stays in the
pool."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import boto3
import pytest

from nodecycle.domain.model import WARM_POOL, Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from nodecycle_sandbox.aws.ec2_consistency import LAG, alternating
from tests.functions.eip.conftest import (
    Clock,
    allocate,
    given,
    lagging_clock,
    now,
    ours,
    run_instances,
    run_while,
)
from tests.support.emf import metric
from tests.support.functions import load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPLAG11"  # the eip function's: its reads lag
LAG_SECONDS = 300.0  # longer than the release's ten attempts (about 3 min 15 s)


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def pool_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    return load_function("eip")


def test_a_warm_pool_stop_minutes_after_the_claim_returns_the_pool_address_once_ec2_knows_the_association(
    pool_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a pool of two free addresses known to EC2 for long, an instance running for long, EC2 whose reads lag
    # its writes by five minutes and go back and forth, and the instance's launch, which claimed one of the pool
    pool = {allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"}) for _ in range(2)}
    (instance,) = run_instances(1)
    LAG.arm(LAG_SECONDS, [FUNCTION_KEY], clock, fresh=alternating(first_fresh=False))
    launch = given(stack, launch_record(instance, at=now()))
    launched = run_while(pool_fn, stack, clock, launch, Step.ASSIGN_EIP)
    assert launched.step is Step.READY_GATE
    assert {a["AllocationId"] for a in ours() if a.get("InstanceId") == instance} == {launched.allocation_id}
    capsys.readouterr()

    # When a scale-in a minute later sends it into the warm pool: its release runs (EC2's writes not knowing the
    # association for minutes yet), then its completion, and then Auto Scaling stops it
    clock.now += 60
    stop = given(stack, terminate_record(instance, at=now(), destination=WARM_POOL))
    over = run_while(pool_fn, stack, clock, stop, Step.RELEASE_EIP, Step.COMPLETE)
    assert over.completed_at is not None
    boto3.client("ec2").stop_instances(InstanceIds=[instance])

    # Then the pool's address is back in its pool, free, not left on the stopped instance; counted returned once
    assert {a["AllocationId"]: a.get("InstanceId") for a in ours()} == dict.fromkeys(pool)
    out = capsys.readouterr().out
    assert (metric(out, "EipsReturned"), metric(out, "EipsReleased")) == (1, 0)


def test_a_warm_pool_stop_whose_reads_never_show_the_claim_within_the_lag_returns_the_pool_address(
    pool_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the same, the launch's reads answered by the replica with every write, and every read after it by one
    # behind (within the window, none shows the association)
    pool = {allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"}) for _ in range(2)}
    (instance,) = run_instances(1)
    fresh = [True]
    LAG.arm(LAG_SECONDS, [FUNCTION_KEY], clock, fresh=lambda: fresh[0])
    launch = given(stack, launch_record(instance, at=now()))
    launched = run_while(pool_fn, stack, clock, launch, Step.ASSIGN_EIP)
    assert launched.step is Step.READY_GATE
    fresh[0] = False
    capsys.readouterr()

    # When a scale-in sends it into the warm pool a minute after its claim, and Auto Scaling stops it after the
    # completion
    clock.now += 60
    stop = given(stack, terminate_record(instance, at=now(), destination=WARM_POOL))
    over = run_while(pool_fn, stack, clock, stop, Step.RELEASE_EIP, Step.COMPLETE)
    assert over.completed_at is not None
    boto3.client("ec2").stop_instances(InstanceIds=[instance])

    # Then the pool's address is back in its pool, free, counted returned once
    assert {a["AllocationId"]: a.get("InstanceId") for a in ours()} == dict.fromkeys(pool)
    out = capsys.readouterr().out
    assert (metric(out, "EipsReturned"), metric(out, "EipsReleased")) == (1, 0)
