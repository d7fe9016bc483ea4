"""A pool address nodecycle allocated (a pool that may grow: EipPoolAllocateWhenEmpty) whose pool tag an operator
removed by hand (retiring it from the pool, the owner tag kept) carries the same tags as an address allocated for one
instance in allocate mode (owner, instance, group, allocated-at). It was released as one: by the sweep once
unassociated past the grace, and by the release of the instance it was first allocated for, a stable address (on
some allow-list) lost to the account. nodecycle never releases an address it did not allocate for one instance: its
allocation into a pool is said by a tag of its own, written at the allocation (``nodecycle:allocated-into``), which
no later tag change makes an instance's. A retired address is left as a by-hand one is: not claimed, not taken back,
not released. On moto, through the eip function and the sweeper's address part."""

from __future__ import annotations

from types import ModuleType

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, POOL_TAG
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from tests.functions.eip.conftest import addresses, current, given, now, run_instances, work_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record, terminate_record
from tests.unit.sweeper.test_orphans import AMPLE


@pytest.fixture
def growing(eip_fn: ModuleType, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_ALLOCATE_WHEN_EMPTY", "true")
    return eip_fn


def grown_for(fn: ModuleType, stack: Stack, instance: str) -> str:
    """The address the instance's launch allocated into its empty pool, and holds."""
    launch = given(stack, launch_record(instance, at=now()))
    fn.handler(work_event(launch), LambdaContext())
    launched = current(stack, launch)
    assert launched.step is Step.READY_GATE
    assert launched.allocation_id is not None
    return launched.allocation_id


def retired(allocation_id: str) -> None:
    """The operator takes the address out of the pool: its pool tag removed (the owner tag kept)."""
    boto3.client("ec2").delete_tags(Resources=[allocation_id], Tags=[{"Key": POOL_TAG}])


def allocated() -> set[str]:
    return {address["AllocationId"] for address in addresses()}


def test_a_retired_pool_address_nodecycle_allocated_is_not_released_by_the_sweep(
    growing: ModuleType, stack: Stack
) -> None:
    # Given an address nodecycle grew its pool with, given back to the pool by its instance's terminate, then
    # retired from the pool by hand, unassociated, allocated an hour before the sweep (past its grace)
    (instance,) = run_instances(1)
    grown = grown_for(growing, stack, instance)
    growing.handler(work_event(given(stack, terminate_record(instance, at=now()))), LambdaContext())
    retired(grown)
    an_hour_ago = "2026-01-01T00:00:00+00:00"
    boto3.client("ec2").create_tags(Resources=[grown], Tags=[{"Key": ALLOCATED_AT_TAG, "Value": an_hour_ago}])

    # When the sweeper runs
    report = address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)

    # Then the address is kept: nodecycle allocated it into a pool, never for an instance to release
    assert grown in allocated()
    assert report.released == 0


def test_a_retired_pool_address_is_not_released_by_the_instance_it_was_allocated_for(
    growing: ModuleType, stack: Stack
) -> None:
    # Given an address nodecycle grew its pool with for an instance that holds it, retired from the pool by hand
    (instance,) = run_instances(1)
    grown = grown_for(growing, stack, instance)
    retired(grown)

    # When the instance terminates
    growing.handler(work_event(given(stack, terminate_record(instance, at=now()))), LambdaContext())

    # Then the address is kept (left where it is, as an address tagged by hand is)
    assert grown in allocated()
