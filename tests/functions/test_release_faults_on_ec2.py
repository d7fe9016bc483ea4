"""RELEASE_EIP on moto (the real EC2 adapter), with EC2 failing as AWS does: throttled, denied, an association or
allocation gone meanwhile, an answer lost after the call landed, an operator's address on the instance."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.eip.release import RELEASE_ATTEMPTS, ReleaseAddresses
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ADDRESSES_LEFT, LifecycleRecord
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, aws_error, run_instances
from tests.support.fakes import FakeMetrics
from tests.support.stack import Stack
from tests.unit.eip.fakes import OWNER, state_change_record, terminate_record

NOW = datetime.now(UTC)
HOUR_AGO = (NOW - timedelta(hours=1)).isoformat(timespec="seconds")


class FaultyEc2(AwsLikeEc2):
    """The AWS-like client, with failures injected into DisassociateAddress too, and ``instead``: what the next
    call of a method does in its place (EC2 changing something between the listing and the call)."""

    def __init__(self, ec2: Any) -> None:
        super().__init__(ec2)
        self.instead: dict[str, Callable[..., Any]] = {}

    def disassociate_address(self, **kwargs: Any) -> Any:
        self._inject("disassociate_address")
        if "disassociate_address" in self.instead:
            return self.instead.pop("disassociate_address")(**kwargs)
        return self.moto.disassociate_address(**kwargs)

    def release_address(self, **kwargs: Any) -> Any:
        if "release_address" in self.instead:
            return self.instead.pop("release_address")(**kwargs)
        return super().release_address(**kwargs)


@pytest.fixture
def ec2(stack: Stack) -> FaultyEc2:
    return FaultyEc2(boto3.client("ec2"))


def step(ec2: AwsLikeEc2, metrics: FakeMetrics | None = None) -> ReleaseAddresses:
    client: Any = ec2  # (a stand-in for the EC2 client: moto's, with AWS's answers where moto differs)
    return ReleaseAddresses(owner=OWNER, addresses=Ec2Addresses(client), metrics=metrics or FakeMetrics())


def run_until_done(ec2: AwsLikeEc2, record: LifecycleRecord) -> Outcome:
    """Run the step as the engine does: again after each wait, until it goes on."""
    release = step(ec2)
    for _ in range(RELEASE_ATTEMPTS + 1):
        outcome = release(record, NOW)
        if not outcome.again:
            return outcome
        record = record.model_copy(update=dict(outcome.changes))
    raise AssertionError("RELEASE_EIP never went on")


def ours(instance: str, **more: str) -> str:
    return allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: instance, ALLOCATED_AT_TAG: HOUR_AGO, **more})


def on(ec2: AwsLikeEc2, allocation: str, instance: str) -> str:
    associated: Any = ec2.moto.associate_address(
        AllocationId=allocation, InstanceId=instance, AllowReassociation=False
    )
    return str(associated["AssociationId"])


def allocation_ids() -> dict[str, str | None]:
    return {a["AllocationId"]: a.get("InstanceId") or None for a in addresses()}


@pytest.mark.parametrize(
    ("method", "code"),
    [("disassociate_address", "RequestLimitExceeded"), ("release_address", "Throttling")],
)
def test_a_throttled_take_back_is_retried_and_releases_the_address(
    ec2: AwsLikeEc2, method: str, code: str
) -> None:
    (instance,) = run_instances(1)
    address = ours(instance)
    on(ec2, address, instance)
    ec2.failures[method] = [aws_error(code, method)]

    with pytest.raises(TransientError):
        step(ec2)(terminate_record(instance), NOW)
    outcome = run_until_done(ec2, terminate_record(instance))

    assert address not in allocation_ids()
    assert ADDRESSES_LEFT not in outcome.changes.get("extra", {})


def test_a_release_that_landed_but_whose_answer_was_lost_goes_on_without_a_leak(ec2: FaultyEc2) -> None:
    (instance,) = run_instances(1)
    address = ours(instance)
    on(ec2, address, instance)
    landed = ec2.moto.release_address

    def lost(**kwargs: Any) -> Any:
        landed(**kwargs)
        raise aws_error("InternalError", "ReleaseAddress")  # (a 5xx after the release)

    ec2.instead["release_address"] = lost
    with pytest.raises(TransientError):
        step(ec2)(terminate_record(instance), NOW)

    outcome = run_until_done(ec2, terminate_record(instance))

    assert allocation_ids() == {}
    assert ADDRESSES_LEFT not in outcome.changes.get("extra", {})


@pytest.mark.parametrize("code", ["InvalidAssociationID.NotFound", "InvalidAllocationID.NotFound"])
def test_an_association_or_allocation_gone_meanwhile_is_no_failure(ec2: AwsLikeEc2, code: str) -> None:
    # Given the instance's address, whose association (or whole allocation) went between the listing and
    # the call: the instance terminated before the step ran, or the sweeper released it
    (instance,) = run_instances(1)
    address = ours(instance)
    association = on(ec2, address, instance)
    if code == "InvalidAssociationID.NotFound":
        ec2.failures["disassociate_address"] = [aws_error(code, "DisassociateAddress")]
        ec2.moto.disassociate_address(AssociationId=association)
    else:
        ec2.failures["release_address"] = [aws_error(code, "ReleaseAddress")]

    outcome = run_until_done(ec2, terminate_record(instance))

    assert ADDRESSES_LEFT not in outcome.changes.get("extra", {})
    if code == "InvalidAssociationID.NotFound":
        assert address not in allocation_ids()


def test_an_address_moved_to_another_instance_meanwhile_is_never_taken_from_it(ec2: FaultyEc2) -> None:
    # Given the instance's address moved to another instance between the listing and the disassociation
    # (EC2 answers the old association id with AuthFailure or NotFound; here AuthFailure)
    instance, other = run_instances(2)
    address = ours(instance)
    association = on(ec2, address, instance)

    def moved(**_: Any) -> Any:
        ec2.moto.disassociate_address(AssociationId=association)
        on(ec2, address, other)
        raise aws_error("AuthFailure", "DisassociateAddress")

    ec2.instead["disassociate_address"] = moved
    outcome = step(ec2)(terminate_record(instance), NOW)
    outcome = run_until_done(ec2, terminate_record(instance).model_copy(update=dict(outcome.changes)))

    assert allocation_ids() == {address: other}


def test_a_denied_release_leaves_the_address_to_the_sweeper_and_the_lifecycle_goes_on(
    ec2: AwsLikeEc2,
) -> None:
    (instance,) = run_instances(1)
    address = ours(instance)
    on(ec2, address, instance)
    denied = aws_error("UnauthorizedOperation", "ReleaseAddress")
    ec2.failures["release_address"] = [denied] * (RELEASE_ATTEMPTS + 1)

    outcome = run_until_done(ec2, terminate_record(instance))

    assert outcome.changes["extra"][ADDRESSES_LEFT] is True
    assert allocation_ids() == {address: None}  # disassociated: the sweeper releases it after the grace


def test_a_stop_never_takes_an_operators_address_tagged_with_the_owner_from_the_instance(
    ec2: AwsLikeEc2,
) -> None:
    # Given a stopped instance holding an operator's static address tagged with this owner by hand (no
    # allocated-at: the sweeper leaves it alone whatever it is associated with), and an address nodecycle
    # allocated for it that a crash left unassociated
    (instance,) = run_instances(1)
    static = allocate(**{OWNER_TAG: OWNER})
    on(ec2, static, instance)
    address = ours(instance)
    boto3.client("ec2").stop_instances(InstanceIds=[instance])

    # When the stop's RELEASE_EIP runs
    run_until_done(ec2, state_change_record(instance, at=NOW - timedelta(minutes=1)))

    # Then nodecycle's address is released, and the operator's stays on the instance for its next start
    assert allocation_ids() == {static: instance}
    assert address


def test_a_pool_address_an_operator_allocated_is_still_returned_to_its_pool(ec2: AwsLikeEc2) -> None:
    # Given a terminating instance holding a pool address the operator allocated (owner and pool tags only)
    (instance,) = run_instances(1)
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    on(ec2, pooled, instance)

    # When RELEASE_EIP runs
    run_until_done(ec2, terminate_record(instance))

    # Then it is free in its pool, never released
    assert allocation_ids() == {pooled: None}


def test_an_instance_terminated_before_the_step_ran_still_has_its_address_released(ec2: AwsLikeEc2) -> None:
    # Given an instance that terminated before its RELEASE_EIP ran (its drain timed out): EC2 ended the
    # association itself, the address stays allocated, tagged for the instance
    (instance,) = run_instances(1)
    address = ours(instance)
    association = on(ec2, address, instance)
    ec2.moto.disassociate_address(AssociationId=association)
    boto3.client("ec2").terminate_instances(InstanceIds=[instance])

    # When RELEASE_EIP runs
    outcome = run_until_done(ec2, terminate_record(instance))

    # Then it is released, found by its tag
    assert allocation_ids() == {}
    assert outcome.changes["allocation_id"] == address
