"""What the tests of the budget ConfigMap created again share (see test_configmap_recreated.py): stack blue's
budget as the drain function wires it, with the lifecycle records that tell a slot it cannot vouch for; the slots
and records of its nodes' terminate lifecycles, begun before either ConfigMap was created; and the drain's steps
(ask, cordon, eviction poll) on the sandbox API server with the product's adapters."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from kubernetes import client

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import DisruptionBudget, SlotRequest
from nodecycle.domain.drain.acquire import AcquireSlot, RecordedLifecycles
from nodecycle.domain.drain.cordon import Cordon
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import add_nodes
from tests.integration.budget.test_configmap_recreated import budget_of as recreated_budget_of
from tests.integration.budget.test_configmap_recreated import cordon, request
from tests.support.fakes import FakeMetrics, InMemoryRecords
from tests.unit.budget.fakes import START, FakeClock
from tests.unit.drain.test_drain_steps import FakeEvents, NoDns, policy, wakes_to_nowhere
from tests.unit.foundation.test_engine import make_record_begun

BEGAN = START - timedelta(minutes=1)  # when the lifecycles began: before either ConfigMap was created
PLAN = (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE)


def budget_of(
    api: client.CoreV1Api, clock: FakeClock, records: InMemoryRecords, total: str = "2"
) -> DisruptionBudget:
    """Stack blue's budget as the drain function wires it, with the lifecycle records that tell a slot it cannot
    vouch for."""
    return recreated_budget_of(api, clock, "blue", total, total, lifecycles=RecordedLifecycles(records))


def six_nodes(
    server: KubeServer, api: client.CoreV1Api, total: str = "2"
) -> tuple[FakeClock, InMemoryRecords, DisruptionBudget]:
    """Given 6 nodes over three zones and stack blue's budget of ``total`` (in all and per zone): its clock, the
    records of its lifecycles (none yet), and its budget."""
    add_nodes(server, 6)
    clock, records = FakeClock(), InMemoryRecords()
    return clock, records, budget_of(api, clock, records, total=total)


def slot_of(i: int) -> SlotRequest:
    """Node ``i``'s slot request, for its lifecycle begun at BEGAN."""
    return replace(request(i), since=BEGAN)


def record_of(slot: SlotRequest, step: Step, seq: int = 0, received_at: datetime = BEGAN) -> LifecycleRecord:
    """Node ``slot.node``'s terminate lifecycle, started and received at ``received_at``, its record at ``step``
    under ``seq``: its heartbeat and global deadlines are those intake gives an action started then, on the
    budget's clock (not the engine tests' months later), so that a drain's deadline cap is where it would be."""
    assert slot.token is not None
    return make_record_begun(
        received_at,
        PLAN,
        step,
        id=slot.record_id,
        owner=slot.owner,
        instance_id=slot.instance_id,
        token=slot.token,
        seq=seq,
    )


def lifecycle_of(slot: SlotRequest, step: Step, seq: int) -> LifecycleRecord:
    """Node ``slot.node``'s terminate lifecycle, its record at ``step`` under ``seq``, its drain begun."""
    return record_of(slot, step, seq).model_copy(
        update={
            "node": slot.node,
            "zone": slot.zone,
            "drain_started_at": BEGAN,
            "drain_deadline": BEGAN + timedelta(minutes=30),
            "extra": {"polls": 4},
        }
    )


def at_its_cordon(slot: SlotRequest) -> LifecycleRecord:
    """Node ``slot.node``'s lifecycle as its CORDON step reads it after its slot's grant (seq 2): its drain not
    begun."""
    return lifecycle_of(slot, Step.CORDON, seq=2).model_copy(
        update={"drain_started_at": None, "drain_deadline": None}
    )


def claimed_and_released(api: client.CoreV1Api, budget: DisruptionBudget, slot: SlotRequest) -> None:
    """Node ``slot.node``'s drain, from its slot to its cleanup's release of the node: granted, cordoned and
    annotated, then its annotations cleared (the node of a terminating instance stays cordoned); its slot not
    given back yet."""
    assert budget.acquire(slot).granted
    cordon(api, slot)
    cluster = KubeCluster(lambda: api.api_client)
    node = cluster.get_node(slot.node)
    assert node is not None
    cluster.release_node(node)


def in_progress(
    api: client.CoreV1Api, budget: DisruptionBudget, records: InMemoryRecords, slot: SlotRequest
) -> None:
    """Node ``slot.node``'s drain in progress: its slot held, its node claimed, its record at its eviction."""
    assert budget.acquire(slot).granted
    cordon(api, slot)
    records.create(lifecycle_of(slot, Step.EVICT, seq=3))


def drained_and_released(api: client.CoreV1Api, slot: SlotRequest, clock: FakeClock) -> None:
    """Node ``slot.node``'s drain, from its slot to its cleanup: cordoned and annotated, then its annotations
    cleared (the node of a terminating instance stays cordoned) and its slot given back by its lifecycle."""
    budget = recreated_budget_of(api, clock, slot.owner)
    claimed_and_released(api, budget, slot)
    assert budget.release(slot.node, slot.record_id, slot.token) == []


def wired(api: client.CoreV1Api, budget: DisruptionBudget) -> dict[str, Any]:
    """The ports a drain step is built with, as the drain function wires them: the product's adapter on the
    sandbox API server, ``budget`` for its slots, nothing woken, the settings' defaults."""
    cluster = KubeCluster(lambda: api.api_client)
    return {
        "finder": NodeFinder(cluster, NoDns()),
        "cluster": cluster,
        "slots": budget,
        "dispatcher": wakes_to_nowhere(),
        "policy": policy(),
        "metrics": FakeMetrics(),
        "events": FakeEvents(),
    }


def acquire_step(api: client.CoreV1Api, budget: DisruptionBudget, records: InMemoryRecords) -> AcquireSlot:
    """The ACQUIRE_SLOT step, wired as the drain function wires it."""
    return AcquireSlot(**wired(api, budget), records=records)


def cordon_step(
    api: client.CoreV1Api,
    budget: DisruptionBudget,
    lifecycles: RecordedLifecycles | None = None,
    *,
    clock: FakeClock,
) -> Cordon:
    """The CORDON step, wired as the drain function wires it (with ``lifecycles``, it reads the records), on the
    test's ``clock``."""
    return Cordon(**wired(api, budget), clock=clock, lifecycles=lifecycles)


def evict_step(
    api: client.CoreV1Api, budget: DisruptionBudget, slot: SlotRequest, state: str = "running"
) -> Evict:
    """The EVICT step of node ``slot.node``'s drain (its polls), EC2 telling its instance ``state``."""
    return Evict(
        cluster=KubeCluster(lambda: api.api_client),
        slots=budget,
        dispatcher=wakes_to_nowhere(),
        instances=NoDns(known={slot.instance_id: state}),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        time_left=lambda: None,
    )


def poll(
    api: client.CoreV1Api, budget: DisruptionBudget, slot: SlotRequest, state: str, now: datetime
) -> Outcome:
    """A delivery of node ``slot.node``'s eviction poll, with the record as it read it (at its eviction, seq 3),
    whatever the record holds now; EC2 tells the instance ``state``."""
    return evict_step(api, budget, slot, state)(lifecycle_of(slot, Step.EVICT, seq=3), now)
