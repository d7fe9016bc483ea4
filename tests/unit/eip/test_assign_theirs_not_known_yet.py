"""A delivery of a launch that verifies the address another delivery of the same launch took (it could not take
that address itself: unknown to it yet) while EC2 does not know that address yet either: EC2's answer that it does
not exist is its lag, as for the launch's own new address, not an address released behind its back."""

from __future__ import annotations

from nodecycle.domain.ports.addresses import AddressNotFound
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import FakeAddresses, Wiring, launch_record
from tests.unit.eip.test_assign_take_throttled import INSTANCE, T0, settings, went_on


def test_the_other_deliverys_address_unknown_to_ec2_at_its_verification_is_read_again_not_replaced() -> None:
    # Given two deliveries of one launch's message, the other having allocated its own address and written it as
    # the one the launch takes, right after this delivery listed the instance's addresses and allocated its own;
    # and DescribeAddresses not knowing the other's address yet at this delivery's first verification
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    record = launch_record(INSTANCE)
    theirs: list[str] = []
    taking = wiring.lines.taking

    def other_first(run: str, allocation_id: str, instead_of: str | None) -> str:
        if not theirs:
            theirs.append(ec2.add(allocated_for=INSTANCE))
            assert taking(run, theirs[0], None) == theirs[0]
        return taking(run, allocation_id, instead_of)

    wiring.lines.taking = other_first  # type: ignore[method-assign]
    assign = wiring.assign(ec2, metrics, eip_policy(settings()))

    # When this delivery runs, the other one associates its address, and this launch runs on
    waiting = assign(record, T0)
    ec2.take(theirs[0], INSTANCE)
    ec2.faults["describe"].append(AddressNotFound("InvalidAllocationID.NotFound"))
    outcomes = [waiting]
    while not went_on(outcomes[-1]) and len(outcomes) < 10:
        record = record.model_copy(update={**outcomes[-1].changes, "seq": record.seq + 1})
        outcomes.append(assign(record, T0))

    # Then it read the other's address again and went on with it: no failure counted, nothing started over
    assert went_on(outcomes[-1])
    assert outcomes[-1].changes["allocation_id"] == theirs[0]
    assert ec2.count("associate") == 0
    assert metrics.counts["EipFailures"] == 0
