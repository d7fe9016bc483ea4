"""A late poll of a finished drain's eviction after the budget ConfigMap was created again.

A drain's eviction polls renew its slot. A late delivery of one (a duplicate that read the record at its
eviction before the commit that went on, then ran after the whole drain: its completion, its cleanup's release)
is refused by the mark its lifecycle's release left (``released``), and its commit loses. Once the ConfigMap is
deleted and created again the mark is gone, and the node no longer names the lifecycle (its cleanup cleared the
annotations), so the seed does not count it either: the renewal finds no holder and takes the slot again
(``reacquired``), a slot nothing renews nor gives back, idle until the sweeper finds the lifecycle over or its
TTL ends, while nodes wait for it. The budget cannot vouch for such a slot (``unmarked``: its ConfigMap was
created after the lifecycle began), so it reads the lifecycle's record, as the first ask does (see
test_late_deliveries_after_recreation.py): over, the slot goes back at once, marked; a drain still running keeps
it. Driven through the Evict step, on the sandbox API server with the product's adapters."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from kubernetes import client

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import DisruptionBudget, SlotReason, SlotRequest
from nodecycle.domain.drain.acquire import RecordedLifecycles
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes, node_name
from tests.integration.budget.test_configmap_recreated import TTL, cordon, recreate_the_configmap, request
from tests.integration.budget.test_configmap_recreated import budget_of as recreated_budget_of
from tests.integration.budget.test_late_deliveries_after_recreation import drained_and_released
from tests.support.fakes import FakeMetrics, InMemoryRecords
from tests.unit.budget.fakes import START, FakeClock
from tests.unit.drain.test_drain_steps import FakeEvents, NoDns, policy, wakes_to_nowhere
from tests.unit.foundation.test_engine import make_record

BEGAN = START - timedelta(minutes=1)  # when the lifecycles began: before either ConfigMap was created


def budget_of(
    api: client.CoreV1Api, clock: FakeClock, records: InMemoryRecords, total: str = "2"
) -> DisruptionBudget:
    """Stack blue's budget as the drain function wires it, with the lifecycle records that tell a slot it cannot
    vouch for."""
    return recreated_budget_of(api, clock, "blue", total, total, lifecycles=RecordedLifecycles(records))


def slot_of(i: int) -> SlotRequest:
    return replace(request(i), since=BEGAN)


def lifecycle_of(slot: SlotRequest, step: Step, seq: int) -> LifecycleRecord:
    """Node ``slot.node``'s terminate lifecycle, its record at ``step`` under ``seq``, its drain begun."""
    plan = (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE)
    assert slot.token is not None
    return make_record(
        plan,
        step,
        id=slot.record_id,
        owner=slot.owner,
        instance_id=slot.instance_id,
        token=slot.token,
        received_at=BEGAN,
        seq=seq,
        node=slot.node,
        zone=slot.zone,
        drain_started_at=BEGAN,
        drain_deadline=BEGAN + timedelta(minutes=30),
        extra={"polls": 4},
    )


def poll(
    api: client.CoreV1Api, budget: DisruptionBudget, slot: SlotRequest, state: str, now: datetime
) -> Outcome:
    """A delivery of node ``slot.node``'s eviction poll, with the record as it read it (at its eviction, seq 3),
    whatever the record holds now; EC2 tells the instance ``state``."""
    cluster = KubeCluster(lambda: api.api_client)
    step = Evict(
        cluster=cluster,
        slots=budget,
        dispatcher=wakes_to_nowhere(),
        instances=NoDns(known={slot.instance_id: state}),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        time_left=lambda: None,
    )
    return step(lifecycle_of(slot, Step.EVICT, seq=3), now)


def test_a_late_poll_of_a_finished_drain_takes_no_slot_after_the_configmap_is_recreated(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given a budget of 2, node 0's drain over (its slot given back, its record done, its instance terminating),
    # then the ConfigMap created again and node 1's drain holding a slot in it
    add_nodes(server, 6)
    clock = FakeClock()
    records = InMemoryRecords()
    blue = budget_of(core, clock, records)
    slot = slot_of(0)
    drained_and_released(core, slot, clock)
    records.create(lifecycle_of(slot, Step.DONE, seq=9))
    recreate_the_configmap(server)
    clock.advance(5)
    assert blue.acquire(slot_of(1)).granted

    # When a late delivery of node 0's eviction poll runs
    late = poll(core, blue, slot, "shutting-down", clock.now())

    # Then node 0 holds no slot (the poll's commit loses: nothing else would give it back), it is marked given
    # back in the new document, and the slot is there for node 2
    assert late.again
    assert [h.node for h in blue.snapshot().holders] == [node_name(1)]
    assert blue.renew(replace(slot, in_progress=True)).reason is SlotReason.RELEASED
    assert blue.acquire(slot_of(2)).granted


def test_a_poll_of_a_drain_still_running_keeps_the_slot_it_takes_again_after_the_configmap_is_recreated(
    server: KubeServer, core: client.CoreV1Api
) -> None:
    # Given node 0's drain in progress (slot held, node claimed, record at its eviction), the ConfigMap created
    # again and seeded by node 1's ask, then node 0's polls late past the seeded holder's TTL (a slow API server)
    add_nodes(server, 6)
    clock = FakeClock()
    records = InMemoryRecords()
    blue = budget_of(core, clock, records)
    slot = slot_of(0)
    assert blue.acquire(slot).granted
    cordon(core, slot)
    records.create(lifecycle_of(slot, Step.EVICT, seq=3))
    recreate_the_configmap(server)
    clock.advance(5)
    assert blue.acquire(slot_of(1)).granted
    assert [h.seeded for h in blue.snapshot().holders if h.node == slot.node] == [True]
    clock.advance(TTL.total_seconds() + 1)

    # When its next poll runs
    polled = poll(core, blue, slot, "running", clock.now())

    # Then it takes its slot again and goes on draining (no pods: the node is drained): its own slot, renewed by
    # its polls and given back by its cleanup
    assert (polled.then, polled.again) == (None, False)
    assert [(h.node, h.record_id) for h in blue.snapshot().holders] == [(slot.node, slot.record_id)]
    assert blue.renew(replace(slot, in_progress=True)).reason is SlotReason.HELD
