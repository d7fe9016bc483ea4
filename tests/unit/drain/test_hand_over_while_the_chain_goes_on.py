"""A waiter woken by a step whose own lifecycle goes on inline (an ask that removed expired holders and was
granted: its cordon and first eviction pass follow in the same invocation), through the engine and the real
budget: the waiter's slot must not idle behind those steps."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import Quantity
from tests.support.fakes import FakeMetrics
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics
from tests.unit.drain.test_drain_steps import (
    NODE,
    FakeCluster,
    FakeEvents,
    NoDns,
    node,
    policy,
    terminating,
)
from tests.unit.foundation.test_engine import World

TTL = timedelta(seconds=60)
WAITING = "i-0waiting/terminate/t"
WAITING_NODE = "ip-10-0-8-8.eu-west-1.compute.internal"


def test_a_waiter_woken_by_an_ask_that_goes_on_to_its_cordon_is_sent_its_wake_not_kept_behind_it() -> None:
    # Given a budget of 2, both slots held since T0 by drains that died, and a lifecycle waiting since
    # T0 + 30 s; at T0 + 61 s the dead drains' holders have expired, the waiter's place not
    world = World()
    owner = terminating(Step.ACQUIRE_SLOT).owner
    budget = DisruptionBudget(
        store=MemoryBudgetStore(),
        nodes=FakeInventory(),
        clock=world.clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("2")),
        holder_ttl=TTL,
        count_unavailable=False,
        owner=owner,
    )
    for i in (1, 2):
        dead = SlotRequest(
            node=f"ip-10-0-9-{i}",
            instance_id=f"i-0dead{i}",
            zone="eu-west-1b",
            owner=owner,
            record_id=f"dead-{i}",
        )
        assert budget.acquire(dead).granted
    world.clock.advance(30)
    waiter = terminating(
        Step.ACQUIRE_SLOT,
        id=WAITING,
        instance_id="i-0waiting",
        slot_waiting_since=world.clock.now(),
        due_at=world.clock.now() + timedelta(seconds=30),
    )
    world.records.create(waiter)
    asking = SlotRequest(
        node=WAITING_NODE,
        instance_id="i-0waiting",
        zone="eu-west-1c",
        owner=owner,
        record_id=WAITING,
        token="t",
    )
    assert not budget.acquire(asking).granted
    world.clock.advance(31)
    # and a newcomer whose cordon (a PATCH) and first eviction pass take 2 s and 3 s
    newcomer = terminating(Step.ACQUIRE_SLOT)
    world.records.create(newcomer)
    cluster = FakeCluster(
        nodes={
            NODE: node(),
            WAITING_NODE: node(name=WAITING_NODE, instance_id="i-0waiting", zone="eu-west-1c"),
        }
    )
    dispatcher = Dispatcher(
        records=world.records, queues=world.queues, clock=world.clock, metrics=FakeMetrics()
    )
    acquire = AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=budget,
        dispatcher=dispatcher,
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=world.records,
    )
    ran: list[tuple[str, Step, datetime]] = []

    def taking(seconds: float, outcome: Outcome) -> Callable[[LifecycleRecord, datetime], Outcome]:
        def step(record: LifecycleRecord, now: datetime) -> Outcome:
            ran.append((record.id, record.step, now))
            world.clock.advance(seconds)
            return outcome

        return step

    engine = world.engine(
        {
            Step.ACQUIRE_SLOT: acquire,
            Step.CORDON: taking(2, Outcome.next()),
            Step.EVICT: taking(3, Outcome.wait(5)),
        }
    )

    # When the newcomer asks: its write removes both dead holders, passes one slot on to the waiter and grants
    # it the other
    engine.handle(world.message(newcomer.id))

    # Then the newcomer goes on with its cordon and first eviction pass, and the waiter is sent its wake-up
    # at once, for the wake lane to run meanwhile; it is not kept until the newcomer's steps are over
    assert [(record_id, step) for record_id, step, _ in ran] == [
        (newcomer.id, Step.CORDON),
        (newcomer.id, Step.EVICT),
    ], f"the waiter ran after the newcomer's cordon and eviction pass, its slot idle meanwhile: {ran}"
    wakes = [(s.message.record_id, s.message.step) for s in world.queues.sent if s.message.wake]
    assert wakes == [(WAITING, Step.ACQUIRE_SLOT)]
