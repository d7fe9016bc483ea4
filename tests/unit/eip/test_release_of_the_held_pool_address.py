"""RELEASE_EIP of an instance going into its warm pool takes back the pool address its launch left it holding
(AddressLines.held) when no listing shows it: EC2's reads may not show a claim of minutes ago, and a stopped
instance keeps what its release does not take."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.eip.line import Held
from nodecycle.domain.eip.release import HELD_FOR, ReleaseAddresses
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import WARM_POOL, LifecycleRecord
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, FakeLines, terminate_record

INSTANCE = "i-0a1b2c3d4e5f60718"
POOL = "ci"


def given_a_claim_no_listing_shows(
    at: timedelta = timedelta(minutes=1),
) -> tuple[FakeAddresses, FakeLines, str]:
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    address = ec2.add(pool=POOL, on=INSTANCE)
    eip = ec2.eips[address]
    lines = FakeLines()
    held = Held(address, str(eip.association_id), eip.public_ip, POOL, T0 - at)
    lines.hold(OWNER, INSTANCE, held)
    return ec2, lines, address


def release(ec2: FakeAddresses, lines: FakeLines, metrics: FakeMetrics, record: LifecycleRecord) -> Outcome:
    return ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics, lines=lines)(record, T0)


def not_known(association_id: str) -> bool:
    """DisassociateAddress answered InvalidAssociationID.NotFound (the port's False)."""
    return False


def hiding_listings(ec2: FakeAddresses) -> None:
    ec2.find = lambda *_, **__: []  # type: ignore[method-assign]  # (a replica behind the claim)


def test_a_claim_no_listing_shows_is_disassociated_and_counted_returned_once() -> None:
    ec2, lines, address = given_a_claim_no_listing_shows()
    hiding_listings(ec2)
    metrics = FakeMetrics()
    record = terminate_record(INSTANCE, destination=WARM_POOL)

    outcome = release(ec2, lines, metrics, record)

    assert not outcome.again
    assert ec2.eips[address].instance_id is None
    assert metrics.counts["EipsReturned"] == 1


def test_a_claim_whose_association_ec2_does_not_know_yet_is_asked_again() -> None:
    ec2, lines, address = given_a_claim_no_listing_shows()
    hiding_listings(ec2)
    ec2.disassociate = not_known  # type: ignore[method-assign]  # (InvalidAssociationID.NotFound)
    metrics = FakeMetrics()

    outcome = release(ec2, lines, metrics, terminate_record(INSTANCE, destination=WARM_POOL))

    assert outcome.again
    assert ec2.eips[address].instance_id == INSTANCE
    assert metrics.counts["EipsReturned"] == 0


def test_a_claim_older_than_held_for_is_left_to_the_listings() -> None:
    ec2, lines, _ = given_a_claim_no_listing_shows(at=HELD_FOR + timedelta(seconds=1))
    hiding_listings(ec2)
    ec2.disassociate = not_known  # type: ignore[method-assign]  # (ended since, by hand)

    outcome = release(ec2, lines, FakeMetrics(), terminate_record(INSTANCE, destination=WARM_POOL))

    assert not outcome.again


def test_a_claim_returned_at_an_earlier_run_is_not_taken_back_again() -> None:
    ec2, lines, _ = given_a_claim_no_listing_shows()
    hiding_listings(ec2)
    ec2.disassociate = not_known  # type: ignore[method-assign]
    metrics = FakeMetrics()
    record = terminate_record(INSTANCE, destination=WARM_POOL, extra={SCRATCH: {"held_returned": True}})

    outcome = release(ec2, lines, metrics, record)

    assert not outcome.again
    assert metrics.counts["EipsReturned"] == 0


def test_a_terminate_for_good_leaves_the_claim_to_ec2() -> None:
    # (EC2 ends a terminated instance's associations itself: the terminate does not wait on a claim it cannot see)
    ec2, lines, address = given_a_claim_no_listing_shows()
    hiding_listings(ec2)

    outcome = release(ec2, lines, FakeMetrics(), terminate_record(INSTANCE))

    assert not outcome.again
    assert ec2.eips[address].instance_id == INSTANCE
