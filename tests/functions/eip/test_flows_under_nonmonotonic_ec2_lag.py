"""The eip function's flows on moto under EC2 that lags and whose reads are not monotonic
(nodecycle_sandbox.aws.ec2_consistency, armed with ``fresh``): a request is answered by one of several replicas,
a later read from one further behind than an earlier one's. The reads here are answered stale and fresh in turn,
stale first, the harshest order for a step that reads, then reads again.

The cases are those of test_flows_under_ec2_lag.py, each delivery coming when its step asked for it (the clock
moved on by its delay); the test's own reads (another caller) see EC2's latest state."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType

import pytest

from nodecycle.domain.model import Step
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
FUNCTION_KEY = "AKIAFUNCTIONEIPLAG07"  # the eip function's: its reads lag
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
    """The function's reads lag ``seconds``, answered stale and fresh in turn (stale first)."""
    LAG.arm(seconds, [FUNCTION_KEY], clock, fresh=alternating(first_fresh=False))


run = run_while


@pytest.mark.parametrize("seconds", LAGS)
def test_a_terminate_whose_listing_is_stale_after_the_launch_saw_its_claim_gives_the_address_back(
    eip_fn: ModuleType,
    stack: Stack,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    seconds: float,
) -> None:
    # Given a pool of two free addresses (known to EC2 for long), EC2 whose reads lag and go back and forth, and
    # an instance just launched
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pool = {allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"}) for _ in range(2)}
    lag(clock, seconds)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))

    # When its launch runs until it goes on (its check seeing the association on a fresh read)
    launched = run(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then it holds one of the pool's, recorded; the pool did not grow; no failure was counted
    assert launched.step is Step.READY_GATE
    held = {a["AllocationId"] for a in ours() if a.get("InstanceId") == instance}
    assert held == {launched.allocation_id}
    assert held <= pool
    assert {a["AllocationId"] for a in ours()} == pool
    out = capsys.readouterr().out
    assert (metric(out, "EipsClaimed"), metric(out, "EipFailures")) == (1, 0)

    # And its terminate, at once (its listing of the instance's addresses stale: nothing on it), gives it back to
    # the pool, free, never released
    terminate = given(stack, terminate_record(instance, at=now()))
    run(eip_fn, stack, clock, terminate, Step.RELEASE_EIP, Step.COMPLETE)
    assert {a["AllocationId"]: a.get("InstanceId") for a in ours()} == dict.fromkeys(pool)
    out = capsys.readouterr().out
    assert (metric(out, "EipsReturned"), metric(out, "EipsReleased"), metric(out, "EipFailures")) == (1, 0, 0)


@pytest.mark.parametrize("mode", ["allocate", "pool"])
def test_a_launch_that_saw_its_new_address_takes_a_later_not_found_for_lag_not_for_a_release(
    eip_fn: ModuleType,
    stack: Stack,
    clock: Clock,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    # Given EC2 whose reads lag its writes by a minute and a half and go back and forth, in allocate mode or with
    # an empty pool that grows when empty, and an instance running for long
    if mode == "pool":
        monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
        monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
        monkeypatch.setenv("NODECYCLE_EIP_POOL_ALLOCATE_WHEN_EMPTY", "true")
    lag(clock, 90.0)
    clock.now -= 200
    (instance,) = run_instances(1)
    clock.now += 200
    launch = given(stack, launch_record(instance, at=now()))

    # When its launch runs until it goes on (a look at the new address answered fresh, a later one
    # InvalidAllocationID.NotFound by a replica behind)
    launched = run(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then it allocated one address, which the instance holds: none was taken for released, the launch did not
    # fail, and no other was allocated
    assert launched.step is Step.READY_GATE, launched.outcome
    (address,) = ours()
    assert (address.get("InstanceId"), launched.allocation_id) == (instance, address["AllocationId"])
    out = capsys.readouterr().out
    assert (metric(out, "EipsAllocated"), metric(out, "EipFailures")) == (1, 0)


@pytest.mark.parametrize("seconds", LAGS)
def test_a_terminate_whose_disassociation_ec2_does_not_know_yet_releases_the_address_of_the_launch(
    eip_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str], seconds: float
) -> None:
    # Given EC2 whose reads lag its writes and go back and forth, and an instance just launched
    lag(clock, seconds)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))

    # When its launch runs until it goes on (its check seeing the new association on a fresh read)
    launched = run(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then the instance holds one address, the one recorded, allocated once, and no failure was counted
    assert launched.step is Step.READY_GATE
    (address,) = ours()
    assert (address.get("InstanceId"), launched.allocation_id) == (instance, address["AllocationId"])
    out = capsys.readouterr().out
    assert (metric(out, "EipsAllocated"), metric(out, "EipFailures")) == (1, 0)

    # And when its terminate runs at once (EC2's writes not knowing the association yet, then its reads not
    # showing the disassociation), the address is disassociated and released, once, none left to the sweeper
    terminate = given(stack, terminate_record(instance, at=now()))
    over = run(eip_fn, stack, clock, terminate, Step.RELEASE_EIP, Step.COMPLETE)
    assert ours() == []
    assert over.completed_at is not None
    out = capsys.readouterr().out
    assert (metric(out, "EipsReleased"), metric(out, "EipFailures")) == (1, 0)
