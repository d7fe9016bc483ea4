"""The hand-over of a node's slot from one lifecycle of its instance to another, through the engine and the
real budget: the one that waited for the other's drain takes the slot within about a second of its release."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import Step, Transition
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import Quantity
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    Ec2Maintenance,
    FakeCluster,
    FakeEvents,
    NoDns,
    maintenance,
    node,
    policy,
    spot,
)
from tests.unit.foundation.test_engine import Script, World


def test_a_lifecycle_waiting_for_its_instances_other_lifecycle_is_woken_by_that_ones_release() -> None:
    # Given a budget of 2, and the drain for a rebalance recommendation of the instance holding its node's slot
    world = World()
    budget = DisruptionBudget(
        store=MemoryBudgetStore(max_attempts=8),
        nodes=FakeInventory(),
        clock=world.clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("2")),
        holder_ttl=timedelta(seconds=300),
        count_unavailable=False,
        owner="stack-a",
    )
    rebalance = spot(
        Step.CLEANUP,
        id=f"{INSTANCE}/rebalance",
        transition=Transition.REBALANCE,
        node=NODE,
        zone="eu-west-1a",
        drain_started_at=T0,
        global_deadline=T0 + timedelta(days=2),
    )
    held = SlotRequest(
        node=NODE,
        instance_id=INSTANCE,
        zone="eu-west-1a",
        owner="stack-a",
        record_id=rebalance.id,
        token=rebalance.token,
    )
    assert budget.acquire(held).granted
    # and the lifecycle of a maintenance of the same instance, days ahead, asking for the node's slot: it waits
    # for the rebalance drain (one slot, one lifecycle)
    maintained = maintenance(Step.ACQUIRE_SLOT, T0 + timedelta(days=3))
    world.records.create(maintained)
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a")})
    waker = Dispatcher(records=world.records, queues=world.queues, clock=world.clock, metrics=FakeMetrics())
    acquire = AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=budget,
        dispatcher=waker,
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=world.records,
    )
    engine = world.engine({Step.ACQUIRE_SLOT: acquire, Step.CORDON: Script([Outcome.wait(5)])})
    engine.handle(world.message(maintained.id))
    (retry,) = world.queues.take()
    assert (retry.message.step, retry.delay) == (Step.ACQUIRE_SLOT, policy().budget_retry_seconds)

    # When the rebalance drain's cleanup gives the slot back, a second later
    world.clock.advance(1)
    Cleanup(
        cluster=cluster,
        slots=budget,
        dispatcher=waker,
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )(rebalance, world.clock.now())

    # Then the maintenance's lifecycle is woken at once and takes the slot, rather than at its retry 30 s later
    woken = [(s.message.step, s.message.wake, s.delay) for s in world.queues.sent]
    assert woken == [(Step.ACQUIRE_SLOT, True, 0)], f"sent {woken}: the slot idles until the 30 s retry"
    (wake,) = world.queues.take()
    engine.handle(wake.message)
    after = world.records.get(maintained.id)
    assert after is not None
    assert after.step is Step.CORDON
