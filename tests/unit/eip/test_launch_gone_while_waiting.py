"""ASSIGN_EIP for a launch waiting in its pool's line (or, in allocate mode, for the address quota) whose
instance goes meanwhile: it waits for nothing from then on (see fakes.py for the EC2 it runs on)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import AddressRefused
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import T0, FakeAddresses, Wiring, launch_record
from tests.unit.eip.test_assign_address import INSTANCE, OTHER, POOL, after, settings

MODES = {
    "pool": {"eip_mode": "pool", "eip_pool_name": POOL},
    "allocate": {"eip_mode": "allocate"},
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("state", ["shutting-down", "terminated"])
def test_a_launch_whose_instance_goes_while_it_waits_for_an_address_ends_at_its_next_look(
    mode: str, state: str
) -> None:
    # Given no address to be had (the pool's one address, or the quota's one, on another instance), and a launch
    # waiting in line for one
    ec2, metrics, wiring = FakeAddresses(quota=1), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    ec2.launch(OTHER)
    ec2.add(pool=POOL if mode == "pool" else None, on=OTHER)
    assign = wiring.assign(ec2, metrics, eip_policy(settings(**MODES[mode], eip_failure_policy="abandon")))
    record = launch_record(INSTANCE)
    first = assign(record, T0)
    assert first.again
    assert wiring.lines.waiting() == [INSTANCE]
    record, now = after(record, first), T0 + timedelta(seconds=first.delay)

    # When its instance is terminated (an operator, a scale-in before it was in service), and it looks again
    ec2.instances[INSTANCE] = state
    calls = len(ec2.calls)
    outcome = assign(record, now)

    # Then its lifecycle ends at once past its completion (the action went with its instance: no completion,
    # whose heartbeat would find it gone and count it expired), without counting an EIP failure, out of the line
    assert outcome.then is Step.DONE
    assert outcome.changes["outcome"] == "instance-gone"
    assert SCRATCH not in outcome.changes["extra"]
    assert metrics.counts["EipFailures"] == 0
    assert wiring.lines.waiting() == []
    # And that look asked EC2 only for the instance's state: nothing allocated, claimed or associated for it
    assert ec2.calls[calls:] == ["instance_states"]
    assert ec2.on(INSTANCE) == []


def test_a_waiting_launch_whose_instance_ec2_will_not_describe_looks_on_as_before() -> None:
    # Given a launch waiting in its pool's line, and DescribeInstances refused to the role now
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    ec2.launch(OTHER)
    ec2.add(pool=POOL, on=OTHER)
    assign = wiring.assign(ec2, metrics, eip_policy(settings(**MODES["pool"])))
    record = launch_record(INSTANCE)
    first = assign(record, T0)
    record, now = after(record, first), T0 + timedelta(seconds=first.delay)
    ec2.faults["instance_states"].append(AddressRefused("UnauthorizedOperation"))

    # When it looks again
    outcome = assign(record, now)

    # Then it waits on in line, as it did: not knowing is no reason to end it
    assert outcome.again
    assert wiring.lines.waiting() == [INSTANCE]
    assert metrics.counts["EipFailures"] == 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "leaving",
    [
        "Terminating:Wait",
        "Terminating:Proceed",
        "Warmed:Terminating:Wait",
        # scaled in before it was in service, back to its warm pool (ReuseOnScaleIn): the terminate hook holds it
        # there running; an address taken now would stay on it, stopped in the pool, out of the sweeper's reach
        "Warmed:Pending:Wait",
        "Warmed:Running",
    ],
)
def test_a_waiting_launch_whose_instance_the_group_is_terminating_takes_no_address_given_back(
    mode: str, leaving: str
) -> None:
    # Given no address to be had (the pool's one address, or the quota's one, on another instance), and a launch
    # waiting in line for one
    ec2, metrics, wiring = FakeAddresses(quota=1), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE)
    ec2.launch(OTHER)
    given_back = ec2.add(pool=POOL if mode == "pool" else None, allocated_for=OTHER, on=OTHER)
    assign = wiring.assign(ec2, metrics, eip_policy(settings(**MODES[mode], eip_failure_policy="abandon")))
    record = launch_record(INSTANCE)
    first = assign(record, T0)
    assert first.again
    record, now = after(record, first), T0 + timedelta(seconds=first.delay)

    # When the group terminates the waiting launch's instance (its launch action ends with it), which terminate
    # hooks hold there, running in EC2; and the other instance's address comes back (to the pool; released)
    wiring.groups.states[INSTANCE] = leaving
    ec2.terminate(OTHER)
    if mode == "allocate":
        assert ec2.release(given_back)
    allocations = ec2.count("allocate")
    outcome = assign(record, now)

    # Then its lifecycle ends at once, past its completion, without the address, out of the line, and without
    # counting an EIP failure; the address is still there for a live launch
    assert outcome.then is Step.DONE
    assert outcome.changes["outcome"] == "instance-gone"
    assert ec2.on(INSTANCE) == []
    assert ec2.count("allocate") == allocations
    assert metrics.counts["EipFailures"] == 0
    assert wiring.lines.waiting() == []
