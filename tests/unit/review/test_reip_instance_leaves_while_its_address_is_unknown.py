"""ASSIGN_EIP for a launch whose new address EC2 answers as unknown (``InvalidAllocationID.NotFound``) while its
instance leaves: a user terminates it, or its group does (terminate hooks hold it running in EC2), and the
instance's release frees the address allocated for it before EC2 ever showed the address to the launch (see
fakes.py: AssociateAddress answers for the address before the instance, the harsher order, which EC2 does not
document).

An address EC2 has never shown is tried again for as long as the launch may wait (EipWaitSeconds, ten minutes by
default): EC2 may not know it yet, however long its reads lag. For an instance that is going, that was ten minutes
of tries, then an EIP failure counted (the alarm) and the failure policy (abandon: a completion of an action gone
with its instance)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.model import Step
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import T0, FakeAddresses, Wiring, launch_record
from tests.unit.eip.test_assign_address import INSTANCE, after, settings


@pytest.mark.parametrize("leaving", ["group", "ec2"])
def test_a_launch_whose_unknown_address_and_instance_go_ends_as_gone_within_a_minute_or_two(
    leaving: str,
) -> None:
    # Given a launch that allocated its address, whose instance leaves right as it first associates it, the
    # instance's release freeing the address (EC2 never showed it to the launch: it answers NotFound)
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)

    def leaves(allocation_id: str, instance_id: str) -> None:
        if leaving == "group":
            wiring.groups.states[INSTANCE] = "Terminating:Wait"  # (running in EC2)
        else:
            ec2.terminate(INSTANCE)
        del ec2.eips[allocation_id]

    ec2.before["associate"] = leaves
    assign = wiring.assign(
        ec2, metrics, eip_policy(settings(eip_wait_seconds=600, eip_failure_policy="abandon"))
    )
    record, now = launch_record(INSTANCE), T0

    # When the step runs, each run when the last one's wait is over, until it moves on
    outcome = assign(record, now)
    waited = 0.0
    for _ in range(40):
        if not outcome.again:
            break
        waited += outcome.delay
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
        outcome = assign(record, now)

    # Then the launch ends past its completion as gone once its tries of a minute are over (not after its whole
    # wait), no EIP failure counted, nothing allocated again for it
    assert (outcome.then, outcome.changes.get("outcome")) == (Step.DONE, "instance-gone")
    assert waited <= 120, waited
    assert metrics.counts["EipFailures"] == 0
    assert ec2.count("allocate") == 1
    assert ec2.eips == {}
