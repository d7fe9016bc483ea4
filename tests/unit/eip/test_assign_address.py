"""ASSIGN_EIP on an in-memory EC2 that answers as AWS does (see fakes.py): allocation, pool claims,
verification, idempotency under redelivery and crashes, and every failure's outcome."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from nodecycle.domain.eip.assign import (
    FIRST_IN_LINE_DELAY,
    INSTANCE_DELAY,
    REFUSED_ATTEMPTS,
    UNSEEN_TRIES,
    VERIFY_DELAY,
    VERIFY_READS,
    verify_delay,
)
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import (
    ALLOCATED_AT_TAG,
    GROUP_TAG,
    INSTANCE_TAG,
    OWNER_TAG,
    POOL_TAG,
    AddressNotFound,
    AddressRefused,
)
from nodecycle.settings import EipSettings
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import GROUP, OWNER, T0, AsTheEngineRuns, FakeAddresses, Wiring, launch_record

INSTANCE = "i-0fedcba9876543210"
OTHER = "i-0000000000000aaaa"
POOL = "ci"


class LambdaDied(Exception):
    """The function died between two API calls (a timeout, a killed container)."""


def settings(**overrides: Any) -> EipSettings:
    values = {
        "owner_id": OWNER,
        "record_table": "records",
        "drain_queue_url": "https://sqs.example/drain",
        "eip_queue_url": "https://sqs.example/eip",
        "wake_queue_url": "https://sqs.example/wake",
        "managed_groups": GROUP,
        "eip_mode": "allocate",
        **overrides,
    }
    return EipSettings.model_validate(values)


def step(ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring, **overrides: Any) -> AsTheEngineRuns:
    """ASSIGN_EIP as the eip function wires it (the records, the pools' lines), run as its engine runs it."""
    return wiring.assign(ec2, metrics, eip_policy(settings(**overrides)))


def after(record: LifecycleRecord, outcome: Outcome) -> LifecycleRecord:
    """The record as the engine commits it after ``outcome`` (the changes, under the next seq; the step stays on
    a wait)."""
    return record.model_copy(update={**outcome.changes, "seq": record.seq + 1})


def went_on(outcome: Outcome) -> bool:
    return outcome.then is None and not outcome.again


@pytest.fixture
def ec2() -> FakeAddresses:
    fake = FakeAddresses()
    fake.launch(INSTANCE)
    fake.launch(OTHER)
    return fake


@pytest.fixture
def metrics() -> FakeMetrics:
    return FakeMetrics()


@pytest.fixture
def wiring() -> Wiring:
    return Wiring()


# -- allocate mode -------------------------------------------------------------------------------------


def test_a_launch_gets_a_new_address_tagged_for_its_instance_and_goes_on_once_it_holds(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given a running instance whose launch needs an address
    record = launch_record(INSTANCE)

    # When the step runs
    outcome = step(ec2, metrics, wiring)(record, T0)

    # Then the instance holds a new address tagged at creation, and the lifecycle goes on with it recorded
    (eip,) = ec2.on(INSTANCE)
    assert eip.tags == {
        OWNER_TAG: OWNER,
        INSTANCE_TAG: INSTANCE,
        GROUP_TAG: GROUP,
        ALLOCATED_AT_TAG: "2026-11-30T10:00:00+00:00",
    }
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == eip.allocation_id
    assert outcome.changes["public_ip"] == eip.public_ip
    assert ec2.count("describe") == 1  # verified before going on
    assert metrics.counts["EipsAllocated"] == 1
    assert metrics.counts["EipFailures"] == 0


def test_a_redelivery_after_the_association_keeps_the_address_and_allocates_nothing(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given an instance that holds the address an earlier delivery gave it
    held = ec2.add(allocated_for=INSTANCE, on=INSTANCE)

    # When the same launch message is delivered again
    outcome = step(ec2, metrics, wiring)(launch_record(INSTANCE), T0)

    # Then it keeps that address: nothing allocated, nothing associated
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == held
    assert ec2.count("allocate") == ec2.count("associate") == 0
    assert len(ec2.eips) == 1


def test_a_spare_address_associated_after_the_listing_is_not_released_where_ec2_would_release_it_in_use(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given EC2 in a default VPC (ReleaseAddress disassociates an address in use and releases it without an
    # error), an instance holding its address, and a spare allocated for it that another instance gets
    # associated with once the redelivered launch has listed it
    ec2.default_vpc = True
    held = ec2.add(allocated_for=INSTANCE, on=INSTANCE)
    spare = ec2.add(allocated_for=INSTANCE)
    ec2.after["find"] = lambda *_: ec2.take(spare, OTHER)

    # When the launch keeps its address and releases the spares
    outcome = step(ec2, metrics, wiring)(launch_record(INSTANCE), T0)

    # Then the spare stays where it is now: released, it would be taken from the other instance
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == held
    assert ec2.eips[spare].instance_id == OTHER
    assert metrics.counts["EipsReleased"] == 0


def test_a_spare_address_ec2_refuses_to_release_is_left_to_the_sweeper_and_the_launch_keeps_its_own(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given an instance that holds the address a delivery gave it, a spare a concurrent delivery allocated for
    # it, and EC2 refusing to release that spare every time (a service control policy that denies
    # ReleaseAddress), with the failure policy abandon
    held = ec2.add(allocated_for=INSTANCE, on=INSTANCE)
    spare = ec2.add(allocated_for=INSTANCE)
    ec2.faults["release"].extend([AddressRefused("UnauthorizedOperation")] * REFUSED_ATTEMPTS)
    assign, record = step(ec2, metrics, wiring, eip_failure_policy="abandon"), launch_record(INSTANCE)

    # When the launch step runs, as often as it asks to run again
    outcome = assign(record, T0)
    for _ in range(REFUSED_ATTEMPTS):
        if not outcome.again:
            break
        record = after(record, outcome)
        outcome = assign(record, T0)

    # Then the launch goes on with the address the instance holds (never abandoned for a spare), and the
    # spare is left, tagged, to the sweeper
    assert outcome.changes.get("result") is not ActionResult.ABANDON
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == held
    assert ec2.eips[held].instance_id == INSTANCE
    assert spare in ec2.eips
    assert metrics.counts["EipFailures"] == 1


def test_a_crash_between_allocation_and_association_is_repaired_by_the_next_delivery(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given a delivery that allocated an address and died before associating it
    ec2.faults["associate"].append(LambdaDied())
    with pytest.raises(LambdaDied):
        step(ec2, metrics, wiring)(launch_record(INSTANCE), T0)
    (leftover,) = ec2.eips

    # When the message is delivered again
    outcome = step(ec2, metrics, wiring)(launch_record(INSTANCE), T0)

    # Then the address tagged for the instance is associated, and no second one is allocated
    assert went_on(outcome)
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [leftover]
    assert ec2.count("allocate") == 1
    assert len(ec2.eips) == 1


@pytest.mark.parametrize("meanwhile", ["allocate", "associate"])
def test_two_deliveries_of_one_launch_running_at_once_leave_one_address(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring, meanwhile: str
) -> None:
    # Given two deliveries of the same launch message, the second running whole while the first is
    # about to allocate (both allocate) or about to associate (the second finds the first's address)
    record = launch_record(INSTANCE)
    second: list[Outcome] = []
    ec2.before[meanwhile] = lambda *_: second.append(step(ec2, metrics, wiring)(record, T0))

    # When the first one finishes too
    first = step(ec2, metrics, wiring)(record, T0)

    # Then both went on with the same address, and the instance has that one address only
    (eip,) = ec2.eips.values()
    assert eip.instance_id == INSTANCE
    assert went_on(first)
    assert went_on(second[0])
    assert first.changes["allocation_id"] == second[0].changes["allocation_id"] == eip.allocation_id


def test_an_association_that_does_not_show_yet_is_verified_on_a_later_run_without_sleeping(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given DescribeAddresses that shows a new association only on its second read
    ec2.lag = 1
    monkeypatch.setattr(time, "sleep", lambda seconds: pytest.fail(f"the step slept {seconds}s"))
    record = launch_record(INSTANCE)

    # When the step runs
    waiting = step(ec2, metrics, wiring)(record, T0)

    # Then it waits a short while (the engine re-enqueues the message) instead of going on blind
    assert waiting.again
    assert waiting.delay == VERIFY_DELAY

    # And when it runs again, it reads the association, allocating and associating nothing more
    outcome = step(ec2, metrics, wiring)(after(record, waiting), T0)
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == ec2.on(INSTANCE)[0].allocation_id
    assert "eip" not in outcome.changes["extra"]  # the step's scratch is gone with it
    assert ec2.count("allocate") == ec2.count("associate") == 1


def test_an_association_that_never_shows_is_looked_up_again_from_the_start(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given DescribeAddresses that lags longer than the step reads it
    ec2.lag = VERIFY_READS + 1
    record = launch_record(INSTANCE)
    assign = step(ec2, metrics, wiring)

    # When the step has read it as often as it will
    outcomes = [assign(record, T0)]
    while "verify" in outcomes[-1].changes["extra"].get("eip", {}):
        record = after(record, outcomes[-1])
        outcomes.append(assign(record, T0))

    # Then it starts over, and the start finds the instance holding its address: no second allocation
    final = assign(after(record, outcomes[-1]), T0)
    assert len(outcomes) == VERIFY_READS
    assert went_on(final)
    assert ec2.count("allocate") == 1
    assert len(ec2.eips) == 1


def test_an_address_released_behind_our_back_before_it_showed_is_replaced(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given an association not showing yet, and its address released by someone else meanwhile
    ec2.lag = 1
    record = launch_record(INSTANCE)
    waiting = step(ec2, metrics, wiring)(record, T0)
    ec2.lag = 0
    (gone,) = ec2.eips
    ec2.eips[gone].instance_id = ec2.eips[gone].association_id = None
    del ec2.eips[gone]

    # When the step runs again until it goes on
    outcomes = [waiting]
    while not went_on(outcomes[-1]) and len(outcomes) <= VERIFY_READS + 1:
        record = after(record, outcomes[-1])
        outcomes.append(step(ec2, metrics, wiring)(record, T0))

    # Then, EC2 answering that the address does not exist in as many reads as one just allocated gets (it may
    # not know it yet), it counted a failure, started over and gave the instance a new address
    assert len(outcomes) == VERIFY_READS + 1
    assert metrics.counts["EipFailures"] == 1
    outcome = outcomes[-1]
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] != gone
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [outcome.changes["allocation_id"]]


def test_a_new_address_ec2_does_not_know_yet_when_its_association_is_read_is_read_again_not_replaced(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given DescribeAddresses that does not know the new address yet when the step reads its association
    # (InvalidAllocationID.NotFound: EC2 is eventually consistent right after AllocateAddress)
    ec2.faults["describe"] = [AddressNotFound("InvalidAllocationID.NotFound")]
    record = launch_record(INSTANCE)

    # When the step runs, and again once its wait is over
    waiting = step(ec2, metrics, wiring)(record, T0)
    outcome = step(ec2, metrics, wiring)(after(record, waiting), T0)

    # Then it read the association again, as one that does not show yet: the instance holds the one address
    # allocated, and no failure is counted (nor taken for an address released behind our back)
    assert (waiting.again, waiting.delay) == (True, VERIFY_DELAY)
    assert waiting.changes["extra"]["eip"]["verify"]["reads"] == 1
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == ec2.on(INSTANCE)[0].allocation_id
    assert ec2.count("allocate") == ec2.count("associate") == 1
    assert metrics.counts["EipFailures"] == 0


def test_a_new_address_ec2_never_knew_is_tried_until_the_launch_may_wait_no_more_and_never_replaced(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given a new address released by someone else right after its allocation, before any listing showed it or
    # an association took it: EC2 answers InvalidAllocationID.NotFound, as it does for one it does not know yet
    ec2.before["associate"] = lambda allocation_id, instance_id: ec2.eips.pop(allocation_id)
    record, now = launch_record(INSTANCE), T0
    assign = step(ec2, metrics, wiring, eip_wait_seconds=600)

    # When the step runs, each run when the last one's wait is over, until it goes on
    outcomes = [assign(record, now)]
    while not went_on(outcomes[-1]) and outcomes[-1].then is None and len(outcomes) < 40:
        record, now = after(record, outcomes[-1]), now + timedelta(seconds=outcomes[-1].delay)
        outcomes.append(assign(record, now))

    # Then it is tried again, further apart each time (EC2 may not know it yet, however long its reads lag),
    # until the launch may wait no more (EipWaitSeconds from its allocation): the failure policy decides then,
    # one failure counted, and no second address was allocated (it would be one more once the first shows)
    tries = [outcome.delay for outcome in outcomes[:-1]]
    assert tries[: UNSEEN_TRIES - 1] == [verify_delay(unseen) for unseen in range(1, UNSEEN_TRIES)]
    assert set(tries[UNSEEN_TRIES - 1 :]) == {30.0}
    assert 600 <= sum(tries) < 630
    assert "eip-failed" in outcomes[-1].changes["outcome"]
    assert ec2.count("allocate") == 1
    assert metrics.counts["EipFailures"] == 1


@pytest.mark.parametrize(
    ("policy", "goes_to", "result"),
    [("abandon", Step.COMPLETE, ActionResult.ABANDON), ("continue", None, None)],
)
def test_an_exhausted_address_quota_ends_the_assignment_as_the_failure_policy_says(
    ec2: FakeAddresses,
    metrics: FakeMetrics,
    wiring: Wiring,
    policy: str,
    goes_to: Step | None,
    result: ActionResult | None,
) -> None:
    # Given an account whose Elastic IP quota is used up
    ec2.quota = 0

    # When a launch asks for an address, and again until EipWaitSeconds have passed without one given back
    assign = step(ec2, metrics, wiring, eip_failure_policy=policy, eip_wait_seconds=600)
    record, now = launch_record(INSTANCE), T0
    outcome = assign(record, now)
    looks = 1
    while outcome.again:
        assert metrics.counts["EipFailures"] == 0  # (waiting is not failing: the alarm waits too)
        # (alone in the line of the launches waiting for the quota: the first in it, looking every 15 s)
        assert outcome.delay == FIRST_IN_LINE_DELAY
        assert wiring.lines.waiting() == [INSTANCE]
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
        outcome = assign(record, now)
        looks += 1
    assert now - T0 == timedelta(seconds=600)
    assert looks == 600 // FIRST_IN_LINE_DELAY + 1

    # Then the launch is abandoned (the group replaces the instance) or goes on without an address
    assert outcome.then is goes_to
    assert not outcome.again
    assert outcome.changes.get("result") is result
    assert outcome.changes["outcome"].startswith("eip-failed: address quota exceeded")
    assert metrics.counts["EipFailures"] == 1
    assert not ec2.eips
    # And it left the line
    assert wiring.lines.waiting() == []


@pytest.mark.parametrize("mode", ["allocate", "pool"])
@pytest.mark.parametrize(
    ("policy", "goes_to", "result"),
    [("abandon", Step.COMPLETE, ActionResult.ABANDON), ("continue", None, None)],
)
def test_an_instance_that_holds_an_address_not_ours_keeps_it_and_the_failure_policy_says_what_next(
    ec2: FakeAddresses,
    metrics: FakeMetrics,
    wiring: Wiring,
    mode: str,
    policy: str,
    goes_to: Step | None,
    result: ActionResult | None,
) -> None:
    # Given an instance that holds another stack's address (its group managed by two stacks by mistake; an
    # operator's or the instance's own bootstrap's address): EC2 would move it off the instance, silently, for
    # the one nodecycle associates, and its owner's sweeper would then release it
    ec2.add(pool=POOL, allocated_at=None)
    theirs = ec2.add(owner="stack-b", allocated_for=INSTANCE, on=INSTANCE)

    # When the launch asks for an address
    outcome = step(ec2, metrics, wiring, eip_mode=mode, eip_pool_name=POOL, eip_failure_policy=policy)(
        launch_record(INSTANCE), T0
    )

    # Then nothing is associated (nor allocated): the other address stays, and the failure policy decides
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [theirs]
    assert ec2.count("associate") == ec2.count("allocate") == 0
    assert outcome.then is goes_to
    assert not outcome.again
    assert outcome.changes.get("result") is result
    assert outcome.changes["outcome"].startswith(
        f"eip-failed: the instance holds address {ec2.eips[theirs].public_ip} (owner stack-b) already"
    )
    assert metrics.counts["EipFailures"] == 1


def test_an_address_on_another_interface_of_the_instance_does_not_stop_it_getting_one(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given an instance whose bootstrap attached an interface that carries an operator's address: an
    # association with the instance (its primary private IP) leaves that one where it is
    theirs = ec2.add(owner=None, on=INSTANCE, secondary=True)

    outcome = step(ec2, metrics, wiring)(launch_record(INSTANCE), T0)

    assert went_on(outcome)
    assert ec2.eips[theirs].instance_id == INSTANCE
    assert ec2.eips[outcome.changes["allocation_id"]].instance_id == INSTANCE
    assert metrics.counts["EipFailures"] == 0


def test_our_address_for_the_instance_that_a_concurrent_delivery_associated_since_the_listing_is_kept(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given the address an earlier delivery allocated, associated by a concurrent one right after this
    # delivery listed the addresses allocated for the instance
    ours = ec2.add(allocated_for=INSTANCE)
    ec2.before["on_primary_ip"] = lambda instance: ec2.take(ours, instance)

    outcome = step(ec2, metrics, wiring)(launch_record(INSTANCE), T0)

    # Then it is the instance's address, not one in the way
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == ours
    assert metrics.counts["EipFailures"] == 0


@pytest.mark.parametrize(
    ("policy", "goes_to", "result"),
    [("abandon", Step.COMPLETE, ActionResult.ABANDON), ("continue", None, None)],
)
def test_an_association_ec2_refuses_for_good_ends_the_assignment_as_the_failure_policy_says(
    ec2: FakeAddresses,
    metrics: FakeMetrics,
    wiring: Wiring,
    policy: str,
    goes_to: Step | None,
    result: ActionResult | None,
) -> None:
    # Given a subnet without an internet gateway: EC2 refuses every association (Gateway.NotAttached)
    refuse = AddressRefused("Gateway.NotAttached")
    ec2.faults["associate"].extend([refuse] * REFUSED_ATTEMPTS)
    assign, record = step(ec2, metrics, wiring, eip_failure_policy=policy), launch_record(INSTANCE)

    # When a launch asks for an address: it is asked again a few times, minutes apart (a denial may be IAM
    # still propagating after a stack update)
    waits = []
    for _ in range(REFUSED_ATTEMPTS - 1):
        outcome = assign(record, T0)
        assert outcome.again
        waits.append(outcome.delay)
        record = after(record, outcome)
    assert waits == [15, 30, 60]
    outcome = assign(record, T0)

    # Then the policy decides, not the global timeout hours on: abandoned, or on without an address
    assert outcome.then is goes_to
    assert not outcome.again
    assert outcome.changes.get("result") is result
    assert outcome.changes["outcome"].startswith("eip-failed: EC2 refused: Gateway.NotAttached")
    assert metrics.counts["EipFailures"] == REFUSED_ATTEMPTS


def test_throttling_leaves_the_retry_to_the_engine_and_counts_a_failure(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given EC2 throttling the allocation
    ec2.faults["allocate"].append(TransientError("RequestLimitExceeded"))

    # When the step runs, Then the engine gets the transient error to retry with backoff
    with pytest.raises(TransientError):
        step(ec2, metrics, wiring)(launch_record(INSTANCE), T0)
    assert metrics.counts["EipFailures"] == 1
    assert not ec2.eips


def test_a_pending_instance_is_waited_for_and_gets_the_address_allocated_for_it(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given an instance still pending, which EC2 refuses an address
    ec2.launch(INSTANCE, state="pending")
    record = launch_record(INSTANCE)

    # When the step runs, Then it waits for the instance
    waiting = step(ec2, metrics, wiring)(record, T0)
    assert waiting.again
    assert waiting.delay == INSTANCE_DELAY

    # And once the instance runs, it gets the address allocated before, not a second one
    ec2.launch(INSTANCE, state="running")
    outcome = step(ec2, metrics, wiring)(after(record, waiting), T0)
    assert went_on(outcome)
    assert ec2.count("allocate") == 1
    assert len(ec2.on(INSTANCE)) == len(ec2.eips) == 1


@pytest.mark.parametrize("state", ["shutting-down", "terminated"])
def test_an_instance_already_gone_ends_the_launch_as_gone_and_its_new_address_is_released(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring, state: str
) -> None:
    # Given an instance terminated (or shutting down) before its launch step associated its address
    ec2.launch(INSTANCE, state=state)

    # When the step runs (EC2 refuses the association)
    outcome = step(ec2, metrics, wiring)(launch_record(INSTANCE), T0)

    # Then the launch ends past its completion as gone (its action went with its instance), without counting
    # an EIP failure (no live instance is without its address: no page), whatever the failure policy says
    assert outcome.then is Step.DONE
    assert outcome.changes["outcome"] == "instance-gone"
    assert "result" not in outcome.changes
    assert metrics.counts.get("EipFailures", 0) == 0
    # And the address allocated for it does not leak
    assert not ec2.eips


# -- pool mode -----------------------------------------------------------------------------------------


def test_pool_mode_claims_a_free_address_of_its_pool_and_never_one_in_use_or_not_its_own(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given a pool with one address in use and one free, and free addresses of another owner or pool
    in_use = ec2.add(pool=POOL, on=OTHER)
    free = ec2.add(pool=POOL)
    foreign = [
        ec2.add(owner="stack-b", pool=POOL),
        ec2.add(pool="other-pool"),
        ec2.add(owner=None, pool=POOL),
    ]

    # When a launch claims an address
    outcome = step(ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL)(launch_record(INSTANCE), T0)

    # Then it holds the free one, the one in use stays where it was, the others are untouched
    assert went_on(outcome)
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [free]
    assert ec2.eips[in_use].instance_id == OTHER
    assert all(ec2.eips[other].instance_id is None for other in foreign)
    assert metrics.counts["EipsClaimed"] == 1
    assert ec2.count("allocate") == 0


def test_pool_mode_tries_the_next_free_address_when_another_launch_took_one_first(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given two free pool addresses, and another launch that associates whichever one this launch reaches
    # for first, between this launch's listing and its AssociateAddress
    both = {ec2.add(pool=POOL), ec2.add(pool=POOL)}
    ec2.before["associate"] = lambda allocation_id, _instance: ec2.take(allocation_id, OTHER)

    # When the launch claims an address
    outcome = step(ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL)(launch_record(INSTANCE), T0)

    # Then EC2 refused the first (not moved: the other launch keeps it) and the launch holds the second
    assert went_on(outcome)
    (taken,) = ec2.on(OTHER)
    (mine,) = ec2.on(INSTANCE)
    assert {taken.allocation_id, mine.allocation_id} == both
    assert ec2.count("associate") == 2


def test_concurrent_pool_claims_of_other_launches_reach_for_different_addresses() -> None:
    # Given a pool of five free addresses, When launches of twenty instances each claim one from the same listing
    first_choices = set()
    for number in range(20):
        instance = f"i-0000000000000{number:04d}"
        ec2 = FakeAddresses()
        ec2.launch(instance)
        for _ in range(5):
            ec2.add(pool=POOL)
        step(ec2, FakeMetrics(), Wiring(), eip_mode="pool", eip_pool_name=POOL)(launch_record(instance), T0)
        first_choices.add(ec2.on(instance)[0].allocation_id)

    # Then they do not all reach for the same one (which would make every concurrent claim collide)
    assert len(first_choices) > 1


def test_two_deliveries_of_one_pool_launch_reach_for_the_same_address_and_take_it_once(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given a pool of five free addresses, and one launch's message delivered twice at the same moment (SQS
    # at least once: two containers), each delivery having listed the pool before either associated
    for _ in range(5):
        ec2.add(pool=POOL)
    first, second = (step(ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL) for _ in range(2))
    record = launch_record(INSTANCE)
    outcomes: list[Outcome] = []
    ec2.before["associate"] = lambda *args: outcomes.append(second(record, T0))

    # When both claim
    outcomes.insert(0, first(record, T0))

    # Then they took the same address, once: the instance holds what both records name, and no address of
    # the pool was moved off it by the other's association (EC2 moves the one on the primary private IP)
    (held,) = ec2.on(INSTANCE)
    assert [o.changes.get("allocation_id") for o in outcomes] == [held.allocation_id] * 2
    assert ec2.count("associate") == 2  # the second delivery's was refused (associated already), not moved


@pytest.mark.parametrize(("policy", "goes_to"), [("abandon", Step.COMPLETE), ("continue", None)])
def test_an_empty_pool_ends_the_assignment_as_the_failure_policy_says(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring, policy: str, goes_to: Step | None
) -> None:
    # Given a pool whose only address is in use
    ec2.add(pool=POOL, on=OTHER)

    # When a launch claims an address, with no wait for one to be given back
    outcome = step(
        ec2,
        metrics,
        wiring,
        eip_mode="pool",
        eip_pool_name=POOL,
        eip_failure_policy=policy,
        eip_wait_seconds=0,
    )(launch_record(INSTANCE), T0)

    # Then nothing is taken from the other instance and the launch ends per policy
    assert outcome.then is goes_to
    assert outcome.changes["outcome"].startswith("eip-failed: address pool 'ci' is empty")
    assert ec2.on(INSTANCE) == []
    assert len(ec2.on(OTHER)) == 1
    assert metrics.counts["EipFailures"] == 1


def test_a_launch_that_finds_the_pool_empty_takes_the_address_a_terminated_instance_gives_back(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given a pool sized to the fleet, in an instance refresh: the pool's one address is on the instance being
    # replaced, which drains while its replacement launches
    held = ec2.add(pool=POOL, on=OTHER)
    assign = step(ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL)
    record = launch_record(INSTANCE)

    # When the replacement finds the pool empty, and the drain ends two minutes later (its address returned)
    first = assign(record, T0)
    record, now = after(record, first), T0 + timedelta(seconds=first.delay)
    delays = [first.delay]
    while now < T0 + timedelta(seconds=120):
        outcome = assign(record, now)
        assert outcome.again
        assert wiring.lines.waiting() == [INSTANCE]
        delays.append(outcome.delay)
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
    ec2.terminate(OTHER)
    outcome = assign(record, now)

    # Then the replacement takes it, instead of being abandoned (and another launched, and abandoned...): alone
    # in the pool's line, it is the first in it, and looked every 15 s (the address is not left free a minute)
    assert first.again
    assert set(delays) == {FIRST_IN_LINE_DELAY}
    assert went_on(outcome), outcome
    assert outcome.changes["allocation_id"] == held
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [held]
    assert metrics.counts["EipFailures"] == 0
    # And it left the line
    assert wiring.lines.waiting() == []


def test_an_empty_pool_grows_by_one_address_when_the_settings_allow_it(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given an empty pool that may grow
    ec2.add(pool=POOL, on=OTHER)

    # When a launch claims an address
    outcome = step(
        ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL, eip_pool_allocate_when_empty="true"
    )(launch_record(INSTANCE), T0)

    # Then a new address joins the pool (tagged as a pool member and as this stack's) and the launch holds it
    assert went_on(outcome)
    (eip,) = ec2.on(INSTANCE)
    assert eip.tags[POOL_TAG] == POOL
    assert eip.tags[OWNER_TAG] == OWNER
    assert metrics.counts["EipsAllocated"] == metrics.counts["EipsClaimed"] == 1


def test_a_pool_claim_delivered_again_keeps_what_the_first_delivery_claimed(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given an instance that holds a pool address, and a free one left in the pool
    held = ec2.add(pool=POOL, on=INSTANCE)
    ec2.add(pool=POOL)

    # When the launch message is delivered again
    outcome = step(ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL)(launch_record(INSTANCE), T0)

    # Then the instance keeps its address and claims no second one
    assert outcome.changes["allocation_id"] == held
    assert ec2.count("associate") == 0


def test_an_address_refused_as_associated_but_on_this_instance_is_kept(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given a pool address that a concurrent delivery of this launch associates first
    address = ec2.add(pool=POOL)
    ec2.before["associate"] = lambda allocation_id, instance: ec2.take(allocation_id, instance)

    # When this delivery's AssociateAddress is refused
    outcome = step(ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL)(launch_record(INSTANCE), T0)

    # Then it sees the address on its own instance and goes on with it
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == address
    assert ec2.count("associate") == 1


def test_with_eip_mode_turned_off_since_the_plan_was_made_the_launch_goes_on_without_calls(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    outcome = step(ec2, metrics, wiring, eip_mode="off")(launch_record(INSTANCE), T0)

    assert went_on(outcome)
    assert ec2.calls == []


def test_a_launch_whose_old_address_left_to_the_sweeper_fills_the_quota_waits_for_it_to_be_released(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given an account whose Elastic IP quota is used up by an address allocated for the instance an hour ago, by
    # a delivery that died before it associated it: no launch takes it now (TAKE_OWN_WITHIN), the sweeper releases
    # it past its grace
    ec2.quota = 1
    old = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(hours=1))

    # When the launch is delivered again, and looks again while the sweeper has not released the address yet
    assign = step(ec2, metrics, wiring, eip_wait_seconds=600)
    record, now = launch_record(INSTANCE), T0
    outcomes = [assign(record, now)]
    for _ in range(5):
        record, now = after(record, outcomes[-1]), now + timedelta(seconds=outcomes[-1].delay)
        outcomes.append(assign(record, now))

    # Then it waits in the quota's line, as for any address quota used up: not started over until it fails
    assert all(outcome.again for outcome in outcomes)
    assert metrics.counts["EipFailures"] == 0
    assert wiring.lines.waiting() == [INSTANCE]
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == []

    # And once the sweeper released the old address, the launch allocates its own and holds it
    ec2.release(old)
    record, now = after(record, outcomes[-1]), now + timedelta(seconds=outcomes[-1].delay)
    outcome = assign(record, now)
    assert went_on(outcome)
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [outcome.changes["allocation_id"]]
    assert outcome.changes["allocation_id"] != old


def test_an_address_refused_as_associated_that_no_read_shows_associated_yet_is_looked_at_again_not_replaced(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given a pool of two free addresses, and another delivery of this launch that associates the one this
    # delivery reaches for first, right before its AssociateAddress, DescribeAddresses not showing it yet
    pool = {ec2.add(pool=POOL), ec2.add(pool=POOL)}

    def concurrent(allocation_id: str, _instance: str) -> None:
        ec2.take(allocation_id, INSTANCE)
        ec2._hidden[allocation_id] = 1  # (EC2's read lags the association)

    ec2.before["associate"] = concurrent
    record = launch_record(INSTANCE)
    claim = step(ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL)

    # When the launch claims an address (refused: associated), and runs again once its wait is over
    waiting = claim(record, T0)
    outcome = claim(after(record, waiting), T0)

    # Then it looked at that address again rather than take the other, which EC2 would have moved the first
    # off the instance for: the instance holds the first, the other is free, and no failure was counted
    assert (waiting.again, waiting.delay) == (True, VERIFY_DELAY)
    assert went_on(outcome)
    (held,) = ec2.on(INSTANCE)
    assert outcome.changes["allocation_id"] == held.allocation_id
    assert ec2.count("associate") == 1
    assert [eip.allocation_id for eip in ec2.eips.values() if eip.instance_id is None] == list(
        pool - {held.allocation_id}
    )
    assert metrics.counts["EipFailures"] == 0


def test_a_launch_whose_own_address_is_past_taking_releases_it_before_allocating_another(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring
) -> None:
    # Given a launch that allocated an address five minutes ago, known to EC2, never associated (its tries spent on
    # an association that did not show, an instance not taking one): older than TAKE_OWN_WITHIN, the sweeper's now;
    # and an address quota it fills
    ec2.quota = 1
    mine = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(minutes=5))
    eip = ec2.eips[mine]
    allocated = {"allocation_id": mine, "public_ip": eip.public_ip, "tags": dict(eip.tags), "seen": True}
    record = launch_record(INSTANCE, extra={"eip": {"allocated": allocated, "restarts": 2}})

    # When it runs again
    outcome = step(ec2, metrics, wiring)(record, T0)

    # Then it released that address itself before allocating another (never two: the second allocated while the
    # first lingers, or no room for one until the sweeper's grace): the instance holds the new one, the only one
    assert went_on(outcome)
    assert mine not in ec2.eips
    (held,) = ec2.on(INSTANCE)
    assert list(ec2.eips) == [held.allocation_id] == [outcome.changes["allocation_id"]]
    assert metrics.counts["EipsReleased"] == 1


def test_a_delivery_that_cannot_see_the_address_another_delivery_of_its_launch_takes_verifies_that_one(
    ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given two deliveries of one launch's message, the other one having allocated its own address and written it
    # as the one the launch takes, right after this delivery listed the instance's addresses and allocated its own
    record = launch_record(INSTANCE)
    theirs: list[str] = []
    taking = wiring.lines.taking

    def other_first(run: str, allocation_id: str, instead_of: str | None) -> str:
        if not theirs:
            theirs.append(ec2.add(allocated_for=INSTANCE))
            assert taking(run, theirs[0], None) == theirs[0]
        return taking(run, allocation_id, instead_of)

    monkeypatch.setattr(wiring.lines, "taking", other_first)
    assign = step(ec2, metrics, wiring)

    # When this delivery runs, the other one associates its address, and this launch runs on
    waiting = assign(record, T0)
    ec2.take(theirs[0], INSTANCE)
    outcome = assign(after(record, waiting), T0)

    # Then this delivery associated nothing: it verified the other's address, which the instance holds, and its
    # own spare was released
    assert waiting.changes["extra"]["eip"]["verify"]["allocation_id"] == theirs[0]
    assert ec2.count("associate") == 0
    assert went_on(outcome)
    assert outcome.changes["allocation_id"] == theirs[0]
    assert list(ec2.eips) == theirs
    assert metrics.counts["EipFailures"] == 0
