"""The read of a pool's told refusals at every look that lists free addresses (the burst fix) is advice: a table
that throttles it, or a role refused it, must leave a launch as it was before the read was made (it takes a good
address), never fail it."""

from __future__ import annotations

import pytest

from nodecycle.domain.eip.line import Refused
from nodecycle.domain.errors import AccessRefused, TransientError
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import T0, FakeAddresses, Wiring, launch_record, refusing
from tests.unit.eip.test_assign_address import POOL, step, went_on


@pytest.mark.parametrize(
    "fault",
    [
        TransientError("ProvisionedThroughputExceededException"),
        AccessRefused(
            "reading the addresses EC2 refused to the launches of a line", "AccessDeniedException", ""
        ),
    ],
    ids=["throttled", "refused"],
)
def test_launches_take_good_addresses_though_the_refusals_cannot_be_read(fault: Exception) -> None:
    # Given a pool of three good free addresses and two EC2 refuses to every instance, and the table failing every
    # read of the refusals told
    ec2 = FakeAddresses(quota=100)
    addresses = [ec2.add(pool=POOL, allocated_at=None) for _ in range(5)]
    refusing(ec2, set(addresses[3:]), "UnauthorizedOperation")
    wiring, metrics = Wiring(), FakeMetrics()

    def failing(key: str) -> Refused:
        raise fault

    wiring.lines.refusals = failing  # type: ignore[method-assign]
    assign = step(ec2, metrics, wiring, eip_mode="pool", eip_pool_name=POOL, eip_wait_seconds=1800)

    # When three launches look, one after another
    instances = [ec2.launch(f"i-{n + 1:017x}") for n in range(3)]
    outcomes = [assign(launch_record(instance), T0) for instance in instances]

    # Then each went on with a good address of the pool
    assert all(went_on(outcome) for outcome in outcomes)
    assert sorted(eip.allocation_id for i in instances for eip in ec2.on(i)) == sorted(addresses[:3])
