"""The release of an address that runs after its action's completion (an action settled near its global
timeout completes first: see ``flow.completed_first``), late: its message retried for minutes (EC2 throttling),
or dead-lettered and resumed by the sweeper. Meanwhile the instance went into its warm pool, stopped, and was
started again by a scale out: its new launch kept the address the instance still held (a stopped instance
keeps its associations, and ASSIGN_EIP keeps the address allocated for the instance that it finds on it). A
release then would take the address of an instance in service, after the new launch verified it (invariant
4)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.eip.release import ReleaseAddresses
from nodecycle.domain.model import WARM_POOL
from tests.support.fakes import FakeMetrics
from tests.unit.eip.fakes import OWNER, T0, FakeAddresses, terminate_record

INSTANCE = "i-0aaaaaaaaaaaaaaa1"


def test_a_release_after_the_completion_keeps_the_address_of_an_instance_started_again_since() -> None:
    # Given a terminate action into a warm pool, completed near its global timeout before its release ran
    ec2 = FakeAddresses()
    ec2.launch(INSTANCE)
    address = ec2.add(allocated_for=INSTANCE, allocated_at=T0 - timedelta(hours=1), on=INSTANCE)
    completed_at = T0 + timedelta(minutes=1)
    record = terminate_record(
        INSTANCE,
        completed_at=completed_at,
        result="CONTINUE",
        origin="AutoScalingGroup",
        destination=WARM_POOL,
    )
    # and the instance, stopped into its pool, started again since by a scale out, its launch keeping the
    # address it still held
    ec2.instances[INSTANCE] = "stopped"
    ec2.start(INSTANCE, at=completed_at + timedelta(minutes=4))

    # When the release runs, late
    outcome = ReleaseAddresses(owner=OWNER, addresses=ec2, metrics=FakeMetrics())(
        record, completed_at + timedelta(minutes=6)
    )

    # Then the instance keeps its address, and the lifecycle goes on
    assert ec2.eips[address].instance_id == INSTANCE
    assert outcome.then is None
    assert not outcome.again
