"""RELEASE_EIP on an in-memory EC2 that answers as AWS does: what is released, what is returned to its
pool, what is never touched."""

from __future__ import annotations

import pytest

from nodecycle.domain.eip.release import RELEASE_ATTEMPTS, RELEASE_DELAY, ReleaseAddresses
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import AddressInUse
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, terminate_record

INSTANCE = "i-0a1b2c3d4e5f60718"
OTHER = "i-0000000000000bbbb"
POOL = "ci"


@pytest.fixture
def ec2() -> FakeAddresses:
    fake = FakeAddresses()
    fake.launch(INSTANCE)
    fake.launch(OTHER)
    return fake


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


def release(ec2: FakeAddresses, metrics: FakeMetrics, record: LifecycleRecord | None = None) -> Outcome:
    step = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics)
    return step(record or terminate_record(INSTANCE), T0)


def went_on(outcome: Outcome) -> bool:
    return outcome.then is None and not outcome.again


def test_terminate_disassociates_and_releases_the_address_allocated_for_the_instance(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given a terminating instance holding the address allocated for it
    address = ec2.add(allocated_for=INSTANCE, on=INSTANCE)

    # When RELEASE_EIP runs (after the drain), and again a moment later (EC2 refuses the release until the
    # disassociation has settled)
    record = terminate_record(INSTANCE)
    waiting = release(ec2, metrics, record)
    assert waiting.again
    outcome = release(ec2, metrics, record.model_copy(update=dict(waiting.changes)))

    # Then the address is gone from the account and the lifecycle goes on to completion
    assert address not in ec2.eips
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == address
    assert metrics.counts["EipsReleased"] == 1


def test_terminate_returns_a_pool_address_to_its_pool_and_never_releases_it(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given a terminating instance holding a pool address (one the pool grew by for it, even)
    address = ec2.add(pool=POOL, allocated_for=INSTANCE, on=INSTANCE)

    # When RELEASE_EIP runs
    outcome = release(ec2, metrics)

    # Then the address is free in its pool, still allocated
    assert ec2.eips[address].association_id is None
    assert ec2.count("release") == 0
    assert went_on(outcome)
    assert metrics.counts["EipsReturned"] == 1


def test_terminate_never_touches_an_address_of_another_owner(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given a terminating instance holding an address of another stack
    foreign = ec2.add(owner="stack-b", allocated_for=INSTANCE, on=INSTANCE)

    # When RELEASE_EIP runs
    outcome = release(ec2, metrics)

    # Then that address stays where it is
    assert ec2.eips[foreign].instance_id == INSTANCE
    assert ec2.count("disassociate") == ec2.count("release") == 0
    assert went_on(outcome)


def test_an_address_once_this_instances_but_now_on_another_instance_is_left_alone(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given addresses allocated for the terminating instance that another instance holds now
    pool_address = ec2.add(pool=POOL, allocated_for=INSTANCE, on=OTHER)
    moved = ec2.add(allocated_for=INSTANCE, on=OTHER)

    # When RELEASE_EIP runs
    release(ec2, metrics)

    # Then neither is disassociated nor released
    assert ec2.eips[pool_address].instance_id == OTHER
    assert ec2.eips[moved].instance_id == OTHER
    assert ec2.count("disassociate") == ec2.count("release") == 0


def test_an_instance_gone_before_its_drain_finished_still_has_its_address_released(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given an instance terminated behind the hook's back: EC2 disassociated its address, did not release it
    address = ec2.add(allocated_for=INSTANCE, on=INSTANCE)
    ec2.terminate(INSTANCE)

    # When RELEASE_EIP runs
    outcome = release(ec2, metrics)

    # Then the address allocated for it is released all the same
    assert address not in ec2.eips
    assert went_on(outcome)


def test_a_release_refused_while_the_disassociation_settles_is_tried_again_shortly(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given EC2 still showing the address in use right after its disassociation (as the fake does, once)
    address = ec2.add(allocated_for=INSTANCE, on=INSTANCE)
    record = terminate_record(INSTANCE)

    # When RELEASE_EIP runs, Then it waits a moment
    waiting = release(ec2, metrics, record)
    assert waiting.again
    assert waiting.delay == RELEASE_DELAY

    # And the next run releases the address
    outcome = release(ec2, metrics, record.model_copy(update=dict(waiting.changes)))
    assert address not in ec2.eips
    assert went_on(outcome)


def test_an_address_still_in_use_after_every_attempt_is_left_to_the_sweeper_and_counted(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given an address EC2 keeps refusing to release, at the step's last attempt
    address = ec2.add(allocated_for=INSTANCE)
    ec2.faults["release"].append(AddressInUse("InvalidIPAddress.InUse"))
    record = terminate_record(INSTANCE, extra={"eip": {"release_attempts": RELEASE_ATTEMPTS - 1}})

    # When RELEASE_EIP runs
    outcome = release(ec2, metrics, record)

    # Then the lifecycle goes on (the action must be completed) and the failure is counted
    assert went_on(outcome)
    assert address in ec2.eips
    assert metrics.counts["EipFailures"] == 1


def test_an_address_released_already_is_no_error(ec2: FakeAddresses, metrics: FakeMetrics) -> None:
    # Given an address that someone releases between the listing and our release
    address = ec2.add(allocated_for=INSTANCE)
    ec2.before["release"] = lambda allocation_id: ec2.eips.pop(allocation_id)

    # When RELEASE_EIP runs
    outcome = release(ec2, metrics)

    # Then it goes on; nothing was released by us
    assert address not in ec2.eips
    assert went_on(outcome)
    assert metrics.counts["EipsReleased"] == 0


def test_throttling_leaves_the_retry_to_the_engine_and_counts_a_failure(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    ec2.add(allocated_for=INSTANCE, on=INSTANCE)
    ec2.faults["disassociate"].append(TransientError("RequestLimitExceeded"))

    with pytest.raises(TransientError):
        release(ec2, metrics)
    assert metrics.counts["EipFailures"] == 1
