"""A late release (after its action's completion, or of a stop without a hook) settles over two runs: the first
leaves the address on the instance (disassociated, it would lie free and allocated long ago between the runs: what
the sweeper releases), a later one disassociates and releases it if its own look at the instance still finds it
down, or leaves it if it shows a start. What an operator or another caller did in between is never undone: an address moved by hand
to another instance stays there, one released by someone else is no error, a refusal is left to the sweeper."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.eip.release import RELEASE_DELAY, ReleaseAddresses
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.addresses import AddressRefused
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, terminate_record

INSTANCE = "i-0a1b2c3d4e5f60718"
OTHER = "i-0000000000000bbbb"
COMPLETED_AT = T0 - timedelta(minutes=1)


def late_release() -> LifecycleRecord:
    return terminate_record(INSTANCE, completed_at=COMPLETED_AT, outcome="CONTINUE")


def given_a_stopped_instance_holding_its_address() -> tuple[FakeAddresses, str]:
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE, state="stopped", at=T0 - timedelta(days=1))
    ec2.launch(OTHER)
    address = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(days=1), on=INSTANCE)
    return ec2, address


def move_by_hand(ec2: FakeAddresses, address: str, instance: str) -> None:
    """An operator's move of an address to another instance (disassociated first, then associated there)."""
    association = ec2.eips[address].association_id
    assert association is not None
    ec2.disassociate(association)
    ec2.associate(address, instance)


def run(ec2: FakeAddresses, metrics: FakeMetrics, record: LifecycleRecord) -> tuple[Outcome, LifecycleRecord]:
    outcome = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics)(record, T0)
    return outcome, record.model_copy(update=dict(outcome.changes))


def test_the_first_run_leaves_the_address_and_the_second_releases_it_from_an_instance_still_down() -> None:
    ec2, address = given_a_stopped_instance_holding_its_address()
    metrics = FakeMetrics()

    first, record = run(ec2, metrics, late_release())
    assert (first.again, first.delay) == (True, RELEASE_DELAY)
    assert address in ec2.eips
    assert ec2.eips[address].instance_id == INSTANCE
    assert (ec2.count("disassociate"), ec2.count("release")) == (0, 0)

    # (the fake refuses the release once after a disassociation, as EC2 does while it settles)
    outcome, record = run(ec2, metrics, record)
    if outcome.again:
        outcome, _ = run(ec2, metrics, record)
    assert not outcome.again
    assert address not in ec2.eips
    assert metrics.counts["EipsReleased"] == 1


def test_a_start_shown_at_the_second_run_gives_the_address_back() -> None:
    ec2, address = given_a_stopped_instance_holding_its_address()
    metrics = FakeMetrics()
    _, record = run(ec2, metrics, late_release())

    ec2.start(INSTANCE, at=T0)
    second, _ = run(ec2, metrics, record)

    assert not second.again
    assert ec2.eips[address].instance_id == INSTANCE
    assert metrics.counts["EipsReleased"] == 0


def test_an_address_moved_by_hand_to_another_instance_between_the_runs_stays_there() -> None:
    ec2, address = given_a_stopped_instance_holding_its_address()
    metrics = FakeMetrics()
    _, record = run(ec2, metrics, late_release())

    move_by_hand(ec2, address, OTHER)
    ec2.start(INSTANCE, at=T0)
    run(ec2, metrics, record)

    assert ec2.eips[address].instance_id == OTHER
    assert metrics.counts["EipsReleased"] == 0


def test_an_address_moved_by_hand_while_the_instance_stays_down_is_neither_released_nor_moved() -> None:
    ec2, address = given_a_stopped_instance_holding_its_address()
    metrics = FakeMetrics()
    _, record = run(ec2, metrics, late_release())

    move_by_hand(ec2, address, OTHER)
    for _ in range(3):
        outcome, record = run(ec2, metrics, record)
        if not outcome.again:
            break

    assert not outcome.again
    assert ec2.eips[address].instance_id == OTHER
    assert metrics.counts["EipsReleased"] == 0


def test_an_address_released_by_someone_else_between_the_runs_is_no_error() -> None:
    ec2, address = given_a_stopped_instance_holding_its_address()
    metrics = FakeMetrics()
    _, record = run(ec2, metrics, late_release())

    del ec2.eips[address]
    second, _ = run(ec2, metrics, record)

    assert not second.again
    assert metrics.counts["EipsReleased"] == 0
    assert metrics.counts["EipFailures"] == 0


def test_a_refused_disassociation_at_the_first_run_is_asked_again_not_taken_for_done() -> None:
    ec2, address = given_a_stopped_instance_holding_its_address()
    metrics = FakeMetrics()
    ec2.faults["disassociate"].append(AddressRefused("UnauthorizedOperation"))

    first, record = run(ec2, metrics, late_release())
    assert first.again
    assert ec2.eips[address].instance_id == INSTANCE

    for _ in range(3):
        outcome, record = run(ec2, metrics, record)
        if not outcome.again:
            break
    assert not outcome.again
    assert address not in ec2.eips
