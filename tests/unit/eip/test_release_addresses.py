"""RELEASE_EIP on an in-memory EC2 that answers as AWS does: what is released, what is returned to its
pool, what is never touched."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from nodecycle.domain.eip.release import RELEASE_ATTEMPTS, RELEASE_DELAY, ReleaseAddresses
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import AddressInUse, AddressRefused
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, state_change_record, terminate_record

INSTANCE = "i-0a1b2c3d4e5f60718"
OTHER = "i-0000000000000bbbb"
POOL = "ci"
STOPPED_AT = T0 - timedelta(minutes=20)  # when EC2 told that the instance stopped (the event came late)


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


def release_until_done(ec2: FakeAddresses, metrics: FakeMetrics, record: LifecycleRecord) -> Outcome:
    """Run RELEASE_EIP until it goes on (EC2 refuses a release while a disassociation settles)."""
    for _ in range(RELEASE_ATTEMPTS):
        outcome = release(ec2, metrics, record)
        if not outcome.again:
            return outcome
        record = record.model_copy(update=dict(outcome.changes))
    raise AssertionError("RELEASE_EIP never went on")


def test_a_late_stop_event_leaves_the_address_of_an_instance_running_again(
    ec2: FakeAddresses, metrics: FakeMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an instance that was stopped outside the hooks and has been started again since (a warm pool's
    # launch, a manual start), holding the address allocated for it before it stopped
    address = ec2.add(allocated_for=INSTANCE, allocated_at=STOPPED_AT - timedelta(hours=1), on=INSTANCE)
    ec2.start(INSTANCE, at=STOPPED_AT + timedelta(minutes=5))

    # When the stop's RELEASE_EIP runs late (no hook: nothing asked Auto Scaling whether it still holds)
    with caplog.at_level(logging.INFO):
        outcome = release(ec2, metrics, state_change_record(INSTANCE, at=STOPPED_AT))

    # Then the running instance keeps its address, the lifecycle ends without a retry, and the log says why
    assert ec2.eips[address].instance_id == INSTANCE
    assert ec2.count("disassociate") == ec2.count("release") == 0
    assert went_on(outcome)
    assert any(f"{INSTANCE} is running" in message for message in caplog.messages)


@pytest.mark.parametrize("state", ["stopping", "stopped", "shutting-down", "terminated", None])
def test_a_stop_event_takes_back_the_address_of_an_instance_that_is_down_or_gone(
    ec2: FakeAddresses, metrics: FakeMetrics, state: str | None
) -> None:
    # Given an instance stopped outside the hooks that is still down (or gone: None), with its address
    address = ec2.add(allocated_for=INSTANCE, allocated_at=STOPPED_AT - timedelta(hours=1), on=INSTANCE)
    if state is None:
        del ec2.instances[INSTANCE]
    else:
        ec2.instances[INSTANCE] = state

    # When the stop's RELEASE_EIP runs
    outcome = release_until_done(ec2, metrics, state_change_record(INSTANCE, at=STOPPED_AT))

    # Then the address is released
    assert address not in ec2.eips
    assert went_on(outcome)


def test_a_stop_event_never_takes_an_address_the_instance_got_after_it_stopped(
    ec2: FakeAddresses, metrics: FakeMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an instance stopped, started again (a launch allocated it a new address) and stopped once more,
    # and a pool address grown after the first stop, which it holds too (a second network interface)
    newer = ec2.add(allocated_for=INSTANCE, allocated_at=STOPPED_AT + timedelta(minutes=5), on=INSTANCE)
    pooled = ec2.add(pool=POOL, allocated_at=STOPPED_AT + timedelta(minutes=6), on=INSTANCE)
    ec2.instances[INSTANCE] = "stopped"

    # When the first stop's RELEASE_EIP runs late
    with caplog.at_level(logging.INFO):
        outcome = release_until_done(ec2, metrics, state_change_record(INSTANCE, at=STOPPED_AT))

    # Then neither address is taken: they came after the stop this lifecycle is for
    assert ec2.eips[newer].instance_id == ec2.eips[pooled].instance_id == INSTANCE
    assert ec2.count("disassociate") == ec2.count("release") == 0
    assert went_on(outcome)
    assert any("after the stop" in message for message in caplog.messages)


def test_an_address_associated_again_after_its_disassociation_is_not_released_in_a_default_vpc(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given EC2 in a default VPC (ReleaseAddress disassociates an address in use and releases it without an
    # error, and here at once after a disassociation), a stopped instance with its address, and a start
    # whose launch associates that address again right after the stop's RELEASE_EIP disassociated it
    ec2.default_vpc, ec2.settling = True, 0
    address = ec2.add(allocated_for=INSTANCE, allocated_at=STOPPED_AT - timedelta(hours=1), on=INSTANCE)
    ec2.instances[INSTANCE] = "stopped"

    def started_and_launched(*_: object) -> None:
        ec2.start(INSTANCE, at=T0)
        ec2.take(address, INSTANCE)

    ec2.after["disassociate"] = started_and_launched

    # When the stop's RELEASE_EIP runs, and again if it waits
    outcome = release_until_done(ec2, metrics, state_change_record(INSTANCE, at=STOPPED_AT))

    # Then the running instance keeps the address
    assert ec2.eips[address].instance_id == INSTANCE
    assert went_on(outcome)


def test_a_release_ec2_refuses_for_good_lets_the_lifecycle_go_on_and_leaves_the_address_to_the_sweeper(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given a terminating instance with two addresses, one of which EC2 will not let go (a denial on its tags)
    refused = ec2.add(allocated_for=INSTANCE, on=INSTANCE)
    other = ec2.add(allocated_for=INSTANCE)
    ec2.settling = 0

    def refuse(association_id: str) -> None:
        ec2.faults["disassociate"].append(AddressRefused("UnauthorizedOperation"))

    # When RELEASE_EIP runs, and runs again as long as it asks to
    record = terminate_record(INSTANCE, outcome="drained")
    for _ in range(RELEASE_ATTEMPTS):
        ec2.before["disassociate"] = refuse
        outcome = release(ec2, metrics, record)
        if not outcome.again:
            break
        record = record.model_copy(update=dict(outcome.changes))

    # Then the other address was released at once; the refused one asked again a few times, then left to
    # the sweeper, and the lifecycle goes on to its completion keeping the drain's outcome
    assert other not in ec2.eips
    assert refused in ec2.eips
    assert went_on(outcome)
    assert "outcome" not in outcome.changes
    assert metrics.counts["EipFailures"] == 1


def test_a_refused_address_does_not_cut_short_the_waits_of_one_ec2_still_shows_in_use(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given a terminating instance with two addresses: EC2 refuses to take back one at every run, and answers the
    # release of the other in use for a while (its disassociation settling)
    refused = ec2.add(allocated_for=INSTANCE, on=INSTANCE)
    settling = ec2.add(allocated_for=INSTANCE)
    ec2.settling = 0
    ec2.faults["release"].extend([AddressInUse("InvalidIPAddress.InUse")] * 3)

    def refuse(association_id: str) -> None:
        ec2.faults["disassociate"].append(AddressRefused("UnauthorizedOperation"))

    # When RELEASE_EIP runs, and runs again as long as it asks to
    record = terminate_record(INSTANCE, outcome="drained")
    runs = 0
    for _ in range(RELEASE_ATTEMPTS):
        runs += 1
        ec2.before["disassociate"] = refuse
        outcome = release(ec2, metrics, record)
        if not outcome.again:
            break
        record = record.model_copy(update=dict(outcome.changes))

    # Then the refused address did not stop the waits of the one in use: released at its fourth run, the refused
    # one left, told once
    assert runs == 4
    assert settling not in ec2.eips
    assert refused in ec2.eips
    assert went_on(outcome)
    assert metrics.counts["EipFailures"] == 1


def test_a_release_after_the_completion_takes_the_address_of_the_settled_action_not_a_later_launchs(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given an action completed near its global timeout before its release ran (it runs right after), whose
    # instance left its warm pool again meanwhile with a new address, and still holds the old one (a second
    # network interface)
    completed_at = T0 + timedelta(minutes=1)
    old = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(hours=1), on=INSTANCE)
    newer = ec2.add(allocated_for=INSTANCE, allocated_at=completed_at + timedelta(minutes=5), on=INSTANCE)

    # When the release runs late, after the completion
    record = terminate_record(INSTANCE, completed_at=completed_at, result="CONTINUE")
    outcome = release_until_done(ec2, metrics, record)

    # Then the settled action's address is released, and the later launch's is kept
    assert old not in ec2.eips
    assert ec2.eips[newer].instance_id == INSTANCE
    assert went_on(outcome)


def test_a_stop_event_takes_back_the_address_of_an_instance_ec2_still_shows_running_since_before_its_stop(
    ec2: FakeAddresses, metrics: FakeMetrics
) -> None:
    # Given an instance stopped outside the hooks that EC2's reads still show running (they lag the stop), launched
    # before the stop and not started since, with its address
    address = ec2.add(allocated_for=INSTANCE, allocated_at=STOPPED_AT - timedelta(hours=1), on=INSTANCE)

    # When the stop's RELEASE_EIP runs
    outcome = release_until_done(ec2, metrics, state_change_record(INSTANCE, at=STOPPED_AT))

    # Then the address is taken back: the instance is down, not started again
    assert address not in ec2.eips
    assert went_on(outcome)
