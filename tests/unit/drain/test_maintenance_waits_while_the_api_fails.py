"""A scheduled maintenance's drain whose slot's asks fail, its node unread (a Kubernetes API outage) or its budget's
ConfigMap failing, asks again from a poll up to every BudgetRetrySeconds for as long as the failure lasts, with no
place in the budget's line. EC2's listing of the maintenance (DescribeInstanceStatus) is looked at by those asks once
per look interval, as a waiter's in line are, not at each of them: EC2 throttles per account, Region and API, and
every maintenance drain of the account asking at once through an outage drew from that one bucket."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from nodecycle.domain.budget import SlotDecision, SlotRequest
from nodecycle.domain.drain.acquire import ASK_BUDGET_FAILING, ASK_UNREAD, AcquireSlot
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import MAINTENANCE_LISTED, LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import maintenance_look_in_line
from nodecycle.domain.ports.cluster import NodeInfo
from nodecycle.domain.ports.instances import ScheduledEvent
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.drain.maintenance_asks import CountingEc2
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    NoDns,
    maintenance,
    node,
    policy,
    wakes_to_nowhere,
)

STARTS = T0 + timedelta(hours=1)  # the maintenance's start: its drain is due at T0, an hour's lead before it
TOLD = T0 - timedelta(days=7)  # AWS Health's notice of it
OUTAGE = timedelta(minutes=10)


class UnreadCluster(FakeCluster):
    """An API server whose every read of a node fails (500 ``etcdserver: request timed out``)."""

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        raise TransientError("etcdserver: request timed out")

    def get_node(self, name: str) -> NodeInfo | None:
        raise TransientError("etcdserver: request timed out")

    def node_version(self, name: str) -> tuple[str | None, str] | None:
        raise TransientError("etcdserver: request timed out")


class FailingBudget(FakeSlots):
    """A budget whose ConfigMap the API server fails at every ask (503)."""

    def acquire(self, request: SlotRequest) -> SlotDecision:
        raise TransientError("the server is currently unable to handle the request")


def _failing(which: str) -> tuple[FakeCluster, FakeSlots]:
    if which == "node-unread":
        return UnreadCluster(nodes={NODE: node()}), FakeSlots()
    return FakeCluster(nodes={NODE: node()}), FailingBudget()


def _step(cluster: FakeCluster, slots: FakeSlots, ec2: CountingEc2) -> AcquireSlot:
    return AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=InMemoryRecords(),
        maintenance=ec2,
    )


def _asked_through(
    step: AcquireSlot, record: LifecycleRecord, start: datetime, until: datetime
) -> tuple[int, LifecycleRecord, Outcome]:
    """The step run at each of its own delays from ``start`` until ``until``, each outcome committed at its run's
    time (updated_at): how many asks, the record after the last, and the last outcome."""
    now, asks = start, 0
    while True:
        outcome = step(record, now)
        asks += 1
        record = record.model_copy(update={**outcome.changes, "updated_at": now})
        if not outcome.again or now + timedelta(seconds=max(outcome.delay, 1)) > until:
            return asks, record, outcome
        now += timedelta(seconds=max(outcome.delay, 1))


def _due() -> LifecycleRecord:
    return maintenance(
        Step.ACQUIRE_SLOT, STARTS, started_at=TOLD, received_at=TOLD, extra={MAINTENANCE_LISTED: True}
    )


@pytest.mark.parametrize("which", ["node-unread", "budget-failing"])
def test_a_maintenance_drain_whose_asks_fail_looks_at_ec2_once_per_look_interval(which: str) -> None:
    # Given a maintenance's drain due now, EC2 listing it at its start, and an API server that fails every read of
    # the node (or the budget's ConfigMap) for ten minutes
    ec2 = CountingEc2(events=[ScheduledEvent(code="system-reboot", not_before=STARTS)])
    cluster, slots = _failing(which)
    look = maintenance_look_in_line(policy().maintenance_lead)

    # When it asks at its due time, then again at each of the delays its outcomes ask for
    asks, record, last = _asked_through(_step(cluster, slots, ec2), _due(), T0, T0 + OUTAGE)

    # Then it waited all along, the failure noted, and looked at EC2 at its first ask and once per look interval
    # since, not at each of its asks
    assert last.again, last
    assert (ASK_UNREAD if which == "node-unread" else ASK_BUDGET_FAILING) in record.extra
    assert asks > 20
    assert ec2.calls <= 1 + OUTAGE // look, (ec2.calls, asks)


@pytest.mark.parametrize("which", ["node-unread", "budget-failing"])
def test_a_maintenance_moved_later_while_its_asks_fail_is_found_within_the_look_interval(which: str) -> None:
    # Given the drain's asks failing since its due time, and EC2 listing the maintenance a day later after the
    # first ask (its customer moved it)
    moved = STARTS + timedelta(days=1)
    ec2 = CountingEc2(events=[ScheduledEvent(code="system-reboot", not_before=STARTS)])
    cluster, slots = _failing(which)
    look = maintenance_look_in_line(policy().maintenance_lead)
    step = _step(cluster, slots, ec2)
    _, record, _ = _asked_through(step, _due(), T0, T0 + timedelta(seconds=1))
    ec2.events = [ScheduledEvent(code="system-reboot", not_before=moved)]

    # When it asks on through the look interval
    _, record, last = _asked_through(
        step, record, T0 + timedelta(seconds=1), T0 + look + timedelta(minutes=1)
    )

    # Then the ask past the interval looked, found the move, and waits for the new start's lead time (looking at EC2 meanwhile): no place in
    # line to give back, and the failure's notes gone with the wait (its next ask is a first ask, counted afresh)
    assert last.again, last
    assert record.global_deadline == moved
    assert not slots.released
    assert ec2.calls == 2, "its first ask's look, and the first past the interval"
    assert ASK_UNREAD not in record.extra
    assert ASK_BUDGET_FAILING not in record.extra
