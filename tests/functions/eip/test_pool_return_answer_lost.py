"""A pool address's DisassociateAddress whose answer is lost (EC2 disassociated it; the answer a 5xx, or read
timeouts past botocore's retries) fails RELEASE_EIP's run with a TransientError. Its retry no longer finds the
address (not on the instance any more, and a pool address is tagged with the instance it was allocated for, not
the one that held it): before, the return was never counted (EipsReturned) and the launches waiting in the pool's
line were not woken for it (the first found it at its own look, up to 15 s on). The step now remembers the
pool addresses whose disassociation went unanswered, and its next run counts as returned those EC2 shows free (or
claimed since) and wakes the line for the free ones. On moto (the real EC2 adapter)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.eip.release import RELEASE_ATTEMPTS, ReleaseAddresses
from nodecycle.domain.eip.wake import LineWaker, Offer
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import AwsLikeEc2, allocate, aws_error, run_instances
from tests.functions.test_release_faults_on_ec2 import FaultyEc2, allocation_ids, on
from tests.support.fakes import FakeMetrics
from tests.support.stack import Stack
from tests.unit.eip.fakes import OWNER, terminate_record

NOW = datetime.now(UTC)


class ToldWaker(LineWaker):
    """What the step tells the waker: addresses given back, by pool."""

    def __init__(self) -> None:
        self.told: Counter[str | None] = Counter()

    def given_back(
        self,
        freed: Mapping[str | None, int],
        now: datetime,
        *,
        passing_over: str | None = None,
        offered: Sequence[Offer] = (),
    ) -> None:
        self.told.update(freed)


@pytest.fixture
def ec2(stack: Stack) -> FaultyEc2:
    return FaultyEc2(boto3.client("ec2"))


def as_the_engine_runs(step: ReleaseAddresses, record: LifecycleRecord) -> Outcome:
    """RELEASE_EIP run as the engine runs it: again after a wait (its changes committed), and again after a
    TransientError (its record as it was: the engine's retry changes nothing the step wrote)."""
    failures = 0
    for _ in range(RELEASE_ATTEMPTS + 3):
        try:
            outcome = step(record, NOW)
        except TransientError:
            failures += 1
            continue
        if not outcome.again:
            return outcome
        record = record.model_copy(update=dict(outcome.changes))
    raise AssertionError(f"RELEASE_EIP never went on ({failures} transient failures)")


@pytest.mark.parametrize("answer", ["InternalError", "timeout"])
def test_a_pool_return_whose_answer_was_lost_is_counted_returned_and_wakes_the_line(
    ec2: FaultyEc2, answer: str
) -> None:
    # Given a terminating instance holding an address of pool ci
    (instance,) = run_instances(1)
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    on(ec2, pooled, instance)
    landed = ec2.moto.disassociate_address

    def lost(**kwargs: Any) -> Any:
        landed(**kwargs)
        if answer == "timeout":  # (as the adapter tells read timeouts past botocore's retries)
            raise TransientError("disassociating an Elastic IP: Read timeout on endpoint URL")
        raise aws_error("InternalError", "DisassociateAddress")  # (a 5xx after the disassociation)

    ec2.instead["disassociate_address"] = lost
    metrics, waker = FakeMetrics(), ToldWaker()
    client: Any = ec2
    step = ReleaseAddresses(owner=OWNER, addresses=Ec2Addresses(client), metrics=metrics, waker=waker)

    # When RELEASE_EIP runs, its disassociation's answer lost, and runs again as the engine runs it
    outcome = as_the_engine_runs(step, terminate_record(instance))

    # Then the address is free in its pool, counted returned, and the pool's line woken for it
    assert not outcome.again
    assert allocation_ids() == {pooled: None}
    assert metrics.counts["EipsReturned"] == 1
    assert waker.told == Counter({"ci": 1})


def test_a_pool_address_claimed_before_the_retry_is_counted_returned_and_never_touched(
    ec2: FaultyEc2,
) -> None:
    # Given a pool address whose disassociation's answer was lost, claimed by a waiting launch before the retry
    instance, waiting = run_instances(2)
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    on(ec2, pooled, instance)
    landed = ec2.moto.disassociate_address

    def lost(**kwargs: Any) -> Any:
        landed(**kwargs)
        on(ec2, pooled, waiting)
        raise aws_error("InternalError", "DisassociateAddress")

    ec2.instead["disassociate_address"] = lost
    metrics, waker = FakeMetrics(), ToldWaker()
    client: Any = ec2
    step = ReleaseAddresses(owner=OWNER, addresses=Ec2Addresses(client), metrics=metrics, waker=waker)

    outcome = as_the_engine_runs(step, terminate_record(instance))

    # Then it stays with the launch that claimed it: returned (counted), no one woken for it
    assert not outcome.again
    assert allocation_ids() == {pooled: waiting}
    assert metrics.counts["EipsReturned"] == 1
    assert not +waker.told


def test_an_unanswered_disassociation_that_did_not_land_is_made_again(ec2: AwsLikeEc2) -> None:
    # Given a pool address on a terminating instance whose disassociation fails before EC2 took it (throttled)
    (instance,) = run_instances(1)
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    on(ec2, pooled, instance)
    ec2.failures["disassociate_address"] = [aws_error("RequestLimitExceeded", "DisassociateAddress")]
    metrics, waker = FakeMetrics(), ToldWaker()
    client: Any = ec2
    step = ReleaseAddresses(owner=OWNER, addresses=Ec2Addresses(client), metrics=metrics, waker=waker)

    outcome = as_the_engine_runs(step, terminate_record(instance))

    # Then the retry disassociates it: returned once, one wake
    assert not outcome.again
    assert allocation_ids() == {pooled: None}
    assert metrics.counts["EipsReturned"] == 1
    assert waker.told == Counter({"ci": 1})
