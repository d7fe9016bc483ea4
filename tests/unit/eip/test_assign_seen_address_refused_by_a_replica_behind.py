"""ASSIGN_EIP's own new address, shown once by EC2 (listed), then answered as unknown by AssociateAddress for longer
than the minute of tries after which a shown address is taken for released: EC2's reads are not monotonic and its
lag may outlast those tries. A read by its allocation id that still finds it is EC2 having it: tried on, never
taken for released (a failure counted, the launch started over to its failure) while it exists."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.engine import Outcome
from nodecycle.domain.ports.addresses import AddressNotFound
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import FakeAddresses, Wiring, launch_record
from tests.unit.eip.test_assign_take_throttled import INSTANCE, T0, settings, went_on

REFUSALS = (
    9  # AssociateAddress answering InvalidAllocationID.NotFound: more than UNSEEN_TRIES (a minute and more)
)


def test_an_address_ec2_listed_then_refused_as_unknown_for_long_while_a_read_finds_it_is_kept() -> None:
    # Given a launch whose new address EC2 listed at once, and whose AssociateAddress answers it is unknown
    # for longer than a minute of tries, while a DescribeAddresses by its id finds it
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    ec2.faults["associate"].extend(AddressNotFound("InvalidAllocationID.NotFound") for _ in range(REFUSALS))
    settings_ = settings().model_copy(update={"eip_wait_seconds": 600})
    assign = wiring.assign(ec2, metrics, eip_policy(settings_))
    record, now = launch_record(INSTANCE), T0
    outcomes: list[Outcome] = [assign(record, now)]
    (first,) = ec2.eips

    # When the step runs, each run when the last one's wait is over, until it goes on
    while not went_on(outcomes[-1]) and outcomes[-1].then is None and len(outcomes) < 40:
        record = record.model_copy(update={**outcomes[-1].changes, "seq": record.seq + 1})
        now += timedelta(seconds=outcomes[-1].delay)
        outcomes.append(assign(record, now))

    # Then the launch goes on with that address, the only one allocated; no failure was counted
    assert went_on(outcomes[-1])
    assert outcomes[-1].changes["allocation_id"] == first
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [first]
    assert ec2.count("allocate") == 1
    assert ec2.count("associate") == REFUSALS + 1
    assert metrics.counts.get("EipFailures", 0) == 0
