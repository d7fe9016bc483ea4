"""A scheduled maintenance's drain whose node another owner claims waits for that owner at every BudgetRetrySeconds;
EC2's listing of the maintenance (DescribeInstanceStatus) is looked at by those asks once per look interval, as a
waiter's in the budget's line are, not at each of them."""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.drain.acquire import OWNER_WAITING_SINCE, AcquireSlot
from nodecycle.domain.model import MAINTENANCE_LISTED, LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import maintenance_look_in_line
from nodecycle.domain.ports.cluster import NodeInfo
from nodecycle.domain.ports.instances import ScheduledEvent
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.drain.maintenance_asks import CountingEc2, ask
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeEvents,
    FakeSlots,
    NoDns,
    maintenance,
    node,
    policy,
    terminating,
    wakes_to_nowhere,
)

STARTS = T0 + timedelta(hours=1)  # the maintenance's start: its drain is due at T0, an hour's lead before it
TOLD = T0 - timedelta(days=7)  # AWS Health's notice of it


def _claimed_by_stack_b() -> NodeInfo:
    """The node, claimed a minute before the drain's due time by stack-b, a stack that writes nothing in this budget."""
    claim = {
        "instance": terminating(Step.ACQUIRE_SLOT).instance_id,
        "transition": "terminate",
        "token": "theirs",
        "started": (T0 - timedelta(minutes=1)).isoformat(),
    }
    return node(owner="stack-b", in_progress=json.dumps(claim), unschedulable=True)


def test_a_maintenance_drain_waiting_for_another_owner_looks_at_ec2_once_per_look_interval() -> None:
    # Given a maintenance's drain due now, EC2 listing it at its start, and its node claimed by stack-b
    ec2 = CountingEc2(events=[ScheduledEvent(code="system-reboot", not_before=STARTS)])
    record: LifecycleRecord = maintenance(
        Step.ACQUIRE_SLOT, STARTS, started_at=TOLD, received_at=TOLD, extra={MAINTENANCE_LISTED: True}
    )
    drain_policy = policy()
    retry = timedelta(seconds=drain_policy.budget_retry_seconds)
    look = maintenance_look_in_line(drain_policy.maintenance_lead)

    # When it asks at its due time, then again at each retry for the whole of its drain timeout
    now, asks = T0, 0
    while now <= T0 + drain_policy.timeout:
        outcome = ask(record, ec2, FakeSlots(), now, drain_policy, found=_claimed_by_stack_b())
        asks += 1
        assert outcome.again, outcome
        record = record.model_copy(update={**outcome.changes, "updated_at": now})
        now += retry

    # Then it waited for stack-b all along, and looked at EC2 at its first ask and once per look interval since,
    # not at each of its asks
    assert asks > 10
    assert ec2.calls <= 1 + drain_policy.timeout // look, (ec2.calls, asks)


def test_a_maintenance_moved_later_while_its_drain_waits_for_another_owner_gives_back_no_place() -> None:
    # Given the drain waiting for stack-b since its due time, a look interval ago, and EC2 now listing the
    # maintenance a day later (its customer moved it)
    drain_policy = policy()
    look = maintenance_look_in_line(drain_policy.maintenance_lead)
    moved = STARTS + timedelta(days=1)
    ec2 = CountingEc2(events=[ScheduledEvent(code="system-reboot", not_before=moved)])
    slots = FakeSlots()
    first = ask(
        maintenance(
            Step.ACQUIRE_SLOT, STARTS, started_at=TOLD, received_at=TOLD, extra={MAINTENANCE_LISTED: True}
        ),
        CountingEc2(events=[ScheduledEvent(code="system-reboot", not_before=STARTS)]),
        slots,
        T0,
        drain_policy,
        found=_claimed_by_stack_b(),
    )
    record = maintenance(Step.ACQUIRE_SLOT, STARTS, started_at=TOLD, received_at=TOLD)
    record = record.model_copy(update={**first.changes, "updated_at": T0 + look - timedelta(seconds=30)})

    before = slots.store.read()

    # When it asks again past the look interval
    outcome = ask(record, ec2, slots, T0 + look, drain_policy, found=_claimed_by_stack_b())

    # Then it looked, and waits for the new start's lead time; it gave back nothing (it had no place in line: a
    # release would have marked the node given back in the budget), and its next first ask is a first ask again
    assert ec2.calls == 1
    assert outcome.again, outcome
    assert outcome.changes["global_deadline"] == moved
    assert slots.store.read() == before
    assert OWNER_WAITING_SINCE not in outcome.changes["extra"]


def test_a_maintenance_moved_later_while_its_drain_waits_for_another_owner_tells_its_new_time_to_give_up() -> (
    None
):
    # Given the drain waiting for stack-b since its due time, told on the node (it gives up at T0 + 10 min)
    drain_policy = policy()
    moved = STARTS + timedelta(days=1)
    events = FakeEvents()
    cluster = FakeCluster(nodes={NODE: _claimed_by_stack_b()})

    def step(ec2: CountingEc2) -> AcquireSlot:
        return AcquireSlot(
            finder=NodeFinder(cluster, NoDns()),
            cluster=cluster,
            slots=FakeSlots(),
            dispatcher=wakes_to_nowhere(),
            policy=drain_policy,
            metrics=FakeMetrics(),
            events=events,
            records=InMemoryRecords(),
            maintenance=ec2,
        )

    record = maintenance(
        Step.ACQUIRE_SLOT, STARTS, started_at=TOLD, received_at=TOLD, extra={MAINTENANCE_LISTED: True}
    )
    first = step(CountingEc2(events=[ScheduledEvent(code="system-reboot", not_before=STARTS)]))(record, T0)
    assert events.written == [(NODE, "NodeClaimedElsewhere", "Warning")]
    record = record.model_copy(update={**first.changes, "updated_at": T0})

    # When its customer moves the maintenance a day later, which its look a look interval on finds, and its drain
    # comes due again for the new start, stack-b's claim still there
    later = CountingEc2(events=[ScheduledEvent(code="system-reboot", not_before=moved)])
    at = T0 + maintenance_look_in_line(drain_policy.maintenance_lead)
    wait = step(later)(record, at)
    record = record.model_copy(update={**wait.changes, "updated_at": at})
    due = moved - drain_policy.maintenance_lead
    again = step(later)(record, due)

    # Then it waits for stack-b again, and tells on the node when it now gives up (its drain timeout after its new
    # due time): the event of a day before named a time long past (and Kubernetes keeps an Event an hour only)
    assert again.again, again
    assert len(events.written) == 2, events.messages
    assert (due + drain_policy.timeout).isoformat() in events.messages[1]
