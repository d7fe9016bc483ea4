"""ASSIGN_EIP for a launch whose instance leaves while the step verifies its association: the group terminates it
(terminate hooks hold it, running in EC2) or EC2 has terminated it, and the terminate's release takes its address
back before EC2's reads show the association (see fakes.py for the EC2 it runs on).

The association then never shows: the step starts over. Started over for an instance that is going, it took the
address given back for released behind its back (EipFailures: the alarm pages for a live instance without its
address) and took another one for the instance (allocate mode: allocated, left on it until EC2 terminates it and the
sweeper releases it; pool mode: a pool address kept from the live launches)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodecycle.domain.eip.assign import VERIFY_READS
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import Address, AddressRefused
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import T0, AsTheEngineRuns, FakeAddresses, Wiring, launch_record
from tests.unit.eip.test_assign_address import INSTANCE, POOL, after, settings

MODES = {
    "pool": {"eip_mode": "pool", "eip_pool_name": POOL},
    "allocate": {"eip_mode": "allocate"},
}


def run_on(assign: AsTheEngineRuns, record: LifecycleRecord, now: datetime) -> Outcome:
    """Run the step as its messages come, until it moves on (20 runs at most)."""
    for _ in range(20):
        outcome = assign(record, now)
        if not outcome.again:
            return outcome
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
    raise AssertionError("still at ASSIGN_EIP after 20 runs")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("leaving", ["group", "ec2"])
def test_a_launch_whose_instance_leaves_as_it_verifies_ends_as_gone_and_takes_no_other_address(
    mode: str, leaving: str
) -> None:
    # Given a launch that associated its address (in pool mode, one of the pool's two), EC2's reads not showing the
    # association yet
    ec2, metrics, wiring = FakeAddresses(lag=1, settling=0), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    pool = [ec2.add(pool=POOL, allocated_at=None) for _ in range(2)] if mode == "pool" else []
    assign = wiring.assign(ec2, metrics, eip_policy(settings(**MODES[mode], eip_failure_policy="abandon")))
    record = launch_record(INSTANCE)
    first = assign(record, T0)
    assert first.again
    (held,) = ec2.on(INSTANCE)
    record, now = after(record, first), T0 + timedelta(seconds=first.delay)

    # When its instance leaves (the group terminates it, terminate hooks holding it running in EC2; or EC2
    # terminated it), and the terminate's release takes the address back (disassociated; released, unless a pool's)
    if leaving == "group":
        wiring.groups.states[INSTANCE] = "Terminating:Wait"
        assert held.association_id is not None
        assert ec2.disassociate(held.association_id)
    else:
        ec2.terminate(INSTANCE)
    if mode == "allocate":
        assert ec2.release(held.allocation_id)
    outcome = run_on(assign, record, now)

    # Then the launch ends past its completion as gone, no EIP failure counted (no page for an instance going)
    assert (outcome.then, outcome.changes.get("outcome")) == (Step.DONE, "instance-gone")
    assert metrics.counts["EipFailures"] == 0
    # And it took no other address for the instance going: nothing allocated again, nothing left on it or for it
    assert ec2.on(INSTANCE) == []
    assert ec2.count("allocate") == (1 if mode == "allocate" else 0)
    assert sorted(ec2.eips) == sorted(pool)


def test_a_start_over_whose_looks_at_the_instance_go_unanswered_starts_over_as_before() -> None:
    # Given a launch whose association does not show in its reads (a live instance, EC2's reads far behind), and
    # EC2 and Auto Scaling that will not tell where the instance is now (a denial, a throttle)
    ec2, metrics, wiring = FakeAddresses(lag=VERIFY_READS + 1), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    ec2.faults["instance_states"].append(AddressRefused("UnauthorizedOperation"))

    def unanswered(instance_id: str) -> str | None:
        raise TransientError("Throttling")

    wiring.groups.lifecycle_state = unanswered  # type: ignore[method-assign]
    assign = wiring.assign(ec2, metrics, eip_policy(settings(**MODES["allocate"])))
    record, now = launch_record(INSTANCE), T0
    outcome = assign(record, now)
    for _ in range(VERIFY_READS - 1):
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
        outcome = assign(record, now)

    # Then the launch starts over as before (not knowing is no reason to end it, nor to fail the step)
    assert outcome.again
    assert outcome.changes["extra"]["eip"]["restarts"] == 1
    assert ec2.count("instance_states") == 1
    assert metrics.counts["EipFailures"] == 0


def test_a_launch_ended_for_an_instance_its_group_terminates_releases_nothing_from_it_while_it_drains() -> (
    None
):
    # Given a launch whose association does not show in its reads for long (EC2's reads far behind, its listings
    # too), in a default VPC (ReleaseAddress of an address in use disassociates and releases it without a word)
    ec2, metrics, wiring = FakeAddresses(lag=VERIFY_READS + 1, default_vpc=True), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    listed = ec2.find

    def behind(owner: str, **filters: str | None) -> list[Address]:
        return [
            Address(**{**vars(a), "association_id": None, "instance_id": None})
            for a in listed(owner, **filters)
        ]

    ec2.find = behind  # type: ignore[method-assign]
    assign = wiring.assign(ec2, metrics, eip_policy(settings(**MODES["allocate"])))
    record, now = launch_record(INSTANCE), T0
    outcome = assign(record, now)
    (held,) = ec2.on(INSTANCE)

    # When its group terminates the instance (terminate hooks hold it running while it drains, its address in
    # use), and the launch's reads still do not show the association
    wiring.groups.states[INSTANCE] = "Terminating:Wait"
    outcome = run_on(assign, after(record, outcome), now + timedelta(seconds=outcome.delay))

    # Then the launch ends as gone, but the address stays on the draining instance: the instance's own release
    # takes it back after the drain (EC2 alone says when an instance is gone and its addresses free)
    assert outcome.changes.get("outcome") == "instance-gone"
    assert [eip.allocation_id for eip in ec2.on(INSTANCE)] == [held.allocation_id]
