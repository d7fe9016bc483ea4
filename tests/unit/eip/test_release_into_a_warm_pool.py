"""RELEASE_EIP of an instance going into its warm pool: what is still on it once it is stopped stays there, out of
the sweeper's reach (the sweeper takes addresses only from gone instances). So the release keeps trying, past its
attempts, while the action is open; not once the action is settled, nor for a refusal (no wait changes a denial)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.eip.release import RELEASE_ATTEMPTS, RELEASE_DELAY_MAX, ReleaseAddresses
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import ADDRESSES_LEFT, WARM_POOL, LifecycleRecord
from nodecycle.domain.ports.addresses import AddressInUse, AddressRefused
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, terminate_record

INSTANCE = "i-0a1b2c3d4e5f60718"
# (a release after the completion has looked at its instance at an earlier run: see test_release_after_relaunch)
PAST_ITS_ATTEMPTS = {SCRATCH: {"release_attempts": RELEASE_ATTEMPTS + 5, "looked": True}}


@pytest.fixture
def ec2() -> FakeAddresses:
    fake = FakeAddresses()
    fake.launch(INSTANCE)
    return fake


def release(ec2: FakeAddresses, metrics: FakeMetrics, record: LifecycleRecord) -> Outcome:
    return ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics)(record, T0)


def test_into_a_warm_pool_an_address_still_in_use_is_tried_again_while_the_action_is_open(
    ec2: FakeAddresses,
) -> None:
    address = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(hours=1))
    ec2.faults["release"].append(AddressInUse("InvalidIPAddress.InUse"))
    metrics = FakeMetrics()
    record = terminate_record(INSTANCE, destination=WARM_POOL, extra=PAST_ITS_ATTEMPTS)

    outcome = release(ec2, metrics, record)

    assert (outcome.again, outcome.delay) == (True, RELEASE_DELAY_MAX)
    assert address in ec2.eips
    assert metrics.counts["EipFailures"] == 0


@pytest.mark.parametrize(
    "settled",
    [
        {
            "destination": WARM_POOL,
            "completed_at": T0,
            "outcome": "CONTINUE",
        },  # a release after the completion
        {},  # terminated for good: EC2 ends its associations itself, the sweeper releases what is left
    ],
)
def test_otherwise_an_address_in_use_past_the_attempts_is_left_to_the_sweeper(
    ec2: FakeAddresses, settled: dict[str, Any]
) -> None:
    address = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(hours=1))
    ec2.faults["release"].append(AddressInUse("InvalidIPAddress.InUse"))
    metrics = FakeMetrics()
    record = terminate_record(INSTANCE, extra=PAST_ITS_ATTEMPTS).model_copy(update=settled)

    outcome = release(ec2, metrics, record)

    assert not outcome.again
    assert outcome.changes["extra"][ADDRESSES_LEFT] is True
    assert address in ec2.eips
    assert metrics.counts["EipFailures"] == 1


def test_into_a_warm_pool_a_refusal_past_the_attempts_is_left_to_the_sweeper(ec2: FakeAddresses) -> None:
    ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(hours=1))
    ec2.faults["release"].append(AddressRefused("UnauthorizedOperation"))
    metrics = FakeMetrics()
    record = terminate_record(INSTANCE, destination=WARM_POOL, extra=PAST_ITS_ATTEMPTS)

    outcome = release(ec2, metrics, record)

    assert not outcome.again
    assert outcome.changes["extra"][ADDRESSES_LEFT] is True
    assert metrics.counts["EipFailures"] == 1


def test_into_a_warm_pool_a_refusal_is_asked_again_for_the_attempts_not_just_once(ec2: FakeAddresses) -> None:
    # Given an address EC2 refuses to take back twice (a denial that lasted seconds) from an instance going into its
    # warm pool: left there, it would stay with the stopped instance, out of the sweeper's reach (a terminate's is
    # asked again only once: EC2 disassociates it at the termination)
    address = ec2.add(allocated_for=INSTANCE, on=INSTANCE, allocated_at=T0 - timedelta(hours=1))
    ec2.settling = 0
    ec2.faults["disassociate"].extend([AddressRefused("UnauthorizedOperation")] * 2)
    metrics = FakeMetrics()
    record = terminate_record(INSTANCE, destination=WARM_POOL)

    # When RELEASE_EIP runs, and runs again as long as it asks to
    for _ in range(RELEASE_ATTEMPTS):
        outcome = release(ec2, metrics, record)
        if not outcome.again:
            break
        record = record.model_copy(update=dict(outcome.changes))

    # Then the third run took it back: released, nothing left, nothing counted
    assert address not in ec2.eips
    assert ADDRESSES_LEFT not in outcome.changes.get("extra", {})
    assert metrics.counts["EipFailures"] == 0
