"""A maintenance lifecycle's ask for a slot in the drain's unit tests: ``AcquireSlot`` with EC2's listing of the
instance's scheduled events (DescribeInstanceStatus), fakes for the rest."""

from __future__ import annotations

from datetime import datetime

from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import DrainPolicy
from nodecycle.domain.ports.cluster import NodeInfo
from nodecycle.domain.ports.instances import ScheduledEvent
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.drain.test_drain_steps import (
    NODE,
    Ec2Maintenance,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    NoDns,
    node,
    policy,
    wakes_to_nowhere,
)


def ask(
    record: LifecycleRecord,
    ec2: Ec2Maintenance,
    slots: FakeSlots,
    now: datetime = T0,
    drain_policy: DrainPolicy | None = None,
    *,
    found: NodeInfo | None = None,
    records: InMemoryRecords | None = None,
) -> Outcome:
    """The lifecycle's ask at ``now``, its node ``found`` (a Ready node by default)."""
    cluster = FakeCluster(nodes={NODE: found or node()})
    step = AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        policy=drain_policy or policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=records or InMemoryRecords(),
        maintenance=ec2,
    )
    return step(record, now)


def listing(*starts: datetime) -> Ec2Maintenance:
    """EC2 listing a system reboot at each of ``starts`` for the instance."""
    return Ec2Maintenance(events=[ScheduledEvent(code="system-reboot", not_before=at) for at in starts])


class CountingEc2(Ec2Maintenance):
    """EC2 that counts the DescribeInstanceStatus calls it answers."""

    calls: int = 0

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        self.calls += 1
        return super().scheduled_events(instance_id)


class FailingEc2(Ec2Maintenance):
    """EC2 that does not answer DescribeInstanceStatus (throttled by default, or refused to the role)."""

    def __init__(self, error: TransientError | None = None) -> None:
        super().__init__()
        self.error = error or TransientError("Throttling: Rate exceeded")

    def scheduled_events(self, instance_id: str) -> list[ScheduledEvent]:
        raise self.error
