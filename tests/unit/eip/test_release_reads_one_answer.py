"""RELEASE_EIP of a stop (no hook) judges an instance up again by its state and its LaunchTime together. EC2's
reads are eventually consistent and not monotonic: two DescribeInstances calls may be answered from different
moments, the later call from the older one. Taken from two answers, a fresh state (running, started again) beside
a stale LaunchTime (the launch before the stop) reads as an instance EC2 does not show stopped yet, and its address
is taken back from an instance in service. One answer tells both of one moment."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.eip.release import ReleaseAddresses
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, state_change_record

INSTANCE = "i-0a1b2c3d4e5f60719"
STOPPED_AT = T0 - timedelta(minutes=20)


def test_an_instance_started_again_keeps_its_address_when_a_later_read_of_ec2_is_answered_from_before_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an instance stopped outside the hooks and started again since, holding the address allocated for it;
    # and EC2 answering a DescribeInstances after the first from a replica that has not seen the start yet
    ec2, metrics = FakeAddresses(), FakeMetrics()
    ec2.launch(INSTANCE, at=STOPPED_AT - timedelta(days=1))
    address = ec2.add(allocated_for=INSTANCE, allocated_at=STOPPED_AT - timedelta(hours=1), on=INSTANCE)
    before_the_start = dict(ec2.launched)
    ec2.start(INSTANCE, at=STOPPED_AT + timedelta(minutes=5))
    answered = 0

    def replica(method: str) -> None:
        nonlocal answered
        answered += 1
        if answered > 1:  # (every later answer from before the start: running, launched before the stop)
            monkeypatch.setattr(ec2, "launched", before_the_start)

    for method in ("instance_states", "launched_at", "launch_state"):
        if hasattr(ec2, method):
            ec2.before[method] = lambda *_, method=method: replica(method)

    # When the stop's RELEASE_EIP runs
    outcome = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=metrics)(
        state_change_record(INSTANCE, at=STOPPED_AT), T0
    )

    # Then the instance in service keeps its address, and the lifecycle ends
    assert ec2.eips[address].instance_id == INSTANCE
    assert ec2.count("disassociate") == ec2.count("release") == 0
    assert not outcome.again
