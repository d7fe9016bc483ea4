"""The sweeper's Elastic IP part on moto under EC2 that lags (sandbox/nodecycle_sandbox/aws/ec2_consistency.py): for a
window after each write, the sweeper's reads see the state before it. Invariant 4: no address released while
associated with a live instance, none stolen, none left unassociated past the sweep grace."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws import clients
from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG
from nodecycle.domain.sweep.addresses import AddressSweepReport
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from nodecycle_sandbox.aws import ec2_addresses
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    allocate,
    current,
    due_now,
    ec2_signing_as,
    given,
    now,
    run_instances,
    work_event,
)
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record
from tests.unit.sweeper.test_orphans import AMPLE

OWNER = "stack-a"  # the settings' owner id (tests/conftest.py)
SWEEPER_KEY = "AKIAFUNCTIONSWEEPLAG"  # the sweeper's: its reads lag
LAG_SECONDS = 3.0


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """EC2 whose reads by the sweeper lag its writes by LAG_SECONDS, on the test's clock."""
    ec2_signing_as(SWEEPER_KEY, monkeypatch)
    clock = Clock()
    LAG.arm(LAG_SECONDS, [SWEEPER_KEY], clock)
    try:
        yield clock
    finally:
        LAG.disarm()


def sweep() -> AddressSweepReport:
    return address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)


def held() -> dict[str, str | None]:
    return {a["AllocationId"]: a.get("InstanceId") or None for a in addresses()}


def ago(**delta: float) -> str:
    return (datetime.now(UTC) - timedelta(**delta)).isoformat(timespec="seconds")


def test_an_address_just_associated_is_not_released_by_a_sweep_that_does_not_see_it_yet(
    clock: Clock,
) -> None:
    # Given an address allocated an hour ago for an instance launched long ago, in a nondefault VPC (EC2
    # refuses to release an address in use)
    clock.now -= 60
    (launching,) = run_instances(1)
    address = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: launching, ALLOCATED_AT_TAG: ago(hours=1)})
    clock.now += 60

    # When the launch associates it, and the sweeper runs within the window (its reads show it unassociated)
    launch: Any = boto3.client("ec2")  # the launch's own client
    launch.associate_address(AllocationId=address, InstanceId=launching, AllowReassociation=False)
    report = sweep()

    # Then the address stays with the launch: not released, not counted
    assert held() == {address: launching}
    assert report.released == 0


@pytest.mark.parametrize("default_vpc", [False, True])
def test_a_late_launch_and_a_sweep_that_does_not_see_its_association_yet_never_reach_for_the_same_address(
    clock: Clock, stack: Stack, monkeypatch: pytest.MonkeyPatch, default_vpc: bool
) -> None:
    # Given an address allocated an hour ago for an instance launched long ago, whose launch crashed after the
    # allocation and is delivered again only now; EC2 in a default VPC or not (in a default VPC ReleaseAddress
    # disassociates an address in use and releases it without an error)
    monkeypatch.setattr(ec2_addresses, "DEFAULT_VPC", default_vpc)
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    clock.now -= 60
    (launching,) = run_instances(1)
    old = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: launching, ALLOCATED_AT_TAG: ago(hours=1)})
    clock.now += 60
    eip_fn = load_function("eip")
    launch = given(stack, launch_record(launching, at=now()))
    # (the sweep runs right after each association the launch makes, its reads not showing it yet)
    associated: list[str] = []
    reports: list[AddressSweepReport] = []
    ec2: Any = clients.client("ec2")

    def remember(params: dict[str, Any], **_: Any) -> None:
        associated.append(params["AllocationId"])

    ec2.meta.events.register("provide-client-params.ec2.AssociateAddress", remember)
    ec2.meta.events.register("after-call.ec2.AssociateAddress", lambda **_: reports.append(sweep()))

    # When the launch runs until it goes on, each delivery when due
    for _ in range(30):
        stored = current(stack, launch)
        if stored.step is not Step.ASSIGN_EIP:
            break
        clock.now += (stored.due_at - stored.updated_at).total_seconds() if stored.due_at else 0.0
        response = eip_fn.handler(work_event(due_now(stack, stored)), LambdaContext())
        assert response.get("batchItemFailures", []) == []

    # Then the instance holds the one address it was given, never one released from it, and the sweeps ran
    # while that association did not show; the address left for an hour is gone, nothing else left behind
    done = current(stack, launch)
    assert done.step is Step.READY_GATE
    assert reports
    assert set(associated) == {done.allocation_id}  # (asked again while EC2 did not know it yet)
    assert held() == {done.allocation_id: launching}
    assert old not in held()


def test_addresses_left_behind_are_released_once_past_the_grace_and_those_just_allocated_are_not(
    clock: Clock,
) -> None:
    # Given, known for long, an address left unassociated an hour ago (its instance gone); and one a launch
    # allocated moments ago for a live instance, unknown to the sweeper's reads for the window
    clock.now -= 60
    (gone, launching) = run_instances(2)
    boto3.client("ec2").terminate_instances(InstanceIds=[gone])
    allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: gone, ALLOCATED_AT_TAG: ago(hours=1)})
    clock.now += 60
    new = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: launching, ALLOCATED_AT_TAG: ago(seconds=1)})

    # When the sweeper runs within the window, and again after it
    first = sweep()
    clock.now += LAG_SECONDS + 1
    second = sweep()

    # Then the one left behind is released, once; the new one is kept (young, whatever EC2 shows)
    assert held() == {new: None}
    assert (first.released, second.released) == (1, 0)
