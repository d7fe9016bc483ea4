"""ASSIGN_EIP for a launch whose instance EC2 does not know (AssociateAddress: ``InvalidInstanceID``; not listed):
EC2's reads may lag RunInstances for minutes. Such an instance was failed at two minutes, as a pending one is (an
EIP failure, the alarm, and the failure policy for a live instance); it is tried on for the launch's wait, and
ends as ``instance-gone`` if its group terminates it meanwhile (nothing released while EC2 does not say gone)."""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step
from nodecycle.wiring.common import eip_policy
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import T0, AsTheEngineRuns, FakeAddresses, Wiring, launch_record
from tests.unit.eip.test_assign_address import INSTANCE, after, settings


def run(assign: AsTheEngineRuns, ec2: FakeAddresses, shows_at: float | None = None) -> tuple[Outcome, float]:
    """The step run each time its wait is over until it moves on; the instance known to EC2 from ``shows_at``
    seconds on. Returns the last outcome and the seconds waited."""
    record, now = launch_record(INSTANCE), T0
    waited = 0.0
    outcome = assign(record, now)
    for _ in range(200):
        if not outcome.again:
            break
        waited += outcome.delay
        if shows_at is not None and waited >= shows_at:
            ec2.launch(INSTANCE, at=T0)
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
        outcome = assign(record, now)
    return outcome, waited


def wired(ec2: FakeAddresses, metrics: FakeMetrics, wiring: Wiring) -> AsTheEngineRuns:
    return wiring.assign(
        ec2, metrics, eip_policy(settings(eip_wait_seconds=600, eip_failure_policy="abandon"))
    )


def test_an_instance_ec2_knows_after_three_minutes_takes_its_address() -> None:
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    outcome, waited = run(wired(ec2, metrics, wiring), ec2, shows_at=180)
    assert outcome.then is None, outcome
    assert not outcome.again
    assert waited >= 180
    assert [eip.instance_id for eip in ec2.eips.values()] == [INSTANCE]
    assert metrics.counts["EipFailures"] == 0


def test_an_instance_ec2_never_knows_fails_at_the_launchs_wait_not_at_two_minutes() -> None:
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    outcome, waited = run(wired(ec2, metrics, wiring), ec2)
    assert outcome.then is Step.COMPLETE, outcome
    assert str(outcome.changes.get("outcome")).startswith("eip-failed")
    assert 600 <= waited <= 600 + 30, waited
    assert metrics.counts["EipFailures"] == 1


def test_a_pending_instance_still_fails_at_two_minutes() -> None:
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    ec2.launch(INSTANCE, state="pending")
    outcome, waited = run(wired(ec2, metrics, wiring), ec2)
    assert outcome.then is Step.COMPLETE, outcome
    assert waited == 120, waited


def test_an_unknown_instance_its_group_terminates_ends_as_gone_and_releases_nothing() -> None:
    # Given an instance EC2 does not know, whose group terminates it after three minutes (terminate hooks hold it)
    ec2, metrics, wiring = FakeAddresses(), FakeMetrics(), Wiring()
    assign = wired(ec2, metrics, wiring)
    record, now = launch_record(INSTANCE), T0
    outcome, waited = assign(record, now), 0.0
    while outcome.again and waited < 180:
        waited += outcome.delay
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
        outcome = assign(record, now)
    wiring.groups.states[INSTANCE] = "Terminating:Wait"
    ended_at: datetime = now
    while outcome.again:
        record, now = after(record, outcome), now + timedelta(seconds=outcome.delay)
        outcome = assign(record, now)

    # Then the launch ends as gone at its next try, no failure counted, its address left for the instance's
    # release (or the sweeper): EC2 does not say the instance is gone
    assert (outcome.then, outcome.changes.get("outcome")) == (Step.DONE, "instance-gone")
    assert (now - ended_at).total_seconds() <= 30
    assert metrics.counts["EipFailures"] == 0
    assert len(ec2.eips) == 1
    assert ec2.count("release") == 0
