"""Wake-ups when a drain step's write to the budget removes an expired holder (a drain that died): the
waiter that removal made eligible takes the slot within about a second, not at its retry."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import Quantity
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import FakeMetrics
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics
from tests.unit.drain.builders import no_end
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeCluster,
    FakeEvents,
    NoDns,
    draining,
    node,
    pod,
    policy,
    terminating,
)
from tests.unit.foundation.test_engine import World

TTL = timedelta(seconds=60)
WAITING = "i-0waiting/terminate/t"


def _a_dead_drains_slot_and_a_waiter(
    world: World, drain: LifecycleRecord | None = None, *, waiters: int = 1
) -> tuple[DisruptionBudget, Dispatcher]:
    """A budget (TTL 60 s) with a slot held since T0 by a drain that died at once (one such slot for each of
    ``waiters``), and one more held by ``drain`` (its slot taken at T0 + 30 s), if given; full, ``waiters``
    lifecycles of the stack (WAITING, then ``_waiting(2)``...) waiting for a slot since T0 + 30 s, in that
    order. The time is T0 + 61 s: the dead drains' holders expired, the waiters not."""
    owner = terminating(Step.ACQUIRE_SLOT).owner
    budget = DisruptionBudget(
        store=MemoryBudgetStore(),
        nodes=FakeInventory(),
        clock=world.clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse(str(waiters + (drain is not None)))),
        holder_ttl=TTL,
        count_unavailable=False,
        owner=owner,
    )
    for i in range(1, waiters + 1):
        dead = SlotRequest(
            node=f"ip-10-0-9-{10 - i}",
            instance_id=f"i-0dead{i}",
            zone="eu-west-1b",
            owner=owner,
            record_id=f"dead-{i}",
        )
        assert budget.acquire(dead).granted
    world.clock.advance(30)
    if drain is not None:
        held = SlotRequest(
            node=NODE,
            instance_id=INSTANCE,
            zone="eu-west-1a",
            owner=owner,
            record_id=drain.id,
            token=drain.token,
        )
        assert budget.acquire(held).granted
    for i in range(1, waiters + 1):
        instance = "i-0waiting" if i == 1 else f"i-0waiting{i}"
        waiter = terminating(
            Step.ACQUIRE_SLOT,
            id=_waiting(i),
            instance_id=instance,
            slot_waiting_since=world.clock.now(),
            due_at=world.clock.now() + timedelta(seconds=30),
        )
        world.records.create(waiter)
        asking = SlotRequest(
            node=f"ip-10-0-8-{9 - i}",
            instance_id=instance,
            zone="eu-west-1c",
            owner=owner,
            record_id=waiter.id,
        )
        assert not budget.acquire(asking).granted
    world.clock.advance(31)
    dispatcher = Dispatcher(
        records=world.records, queues=world.queues, clock=world.clock, metrics=FakeMetrics()
    )
    return budget, dispatcher


def _waiting(i: int) -> str:
    """The record id of the ``i``-th waiter (1: WAITING)."""
    return WAITING if i == 1 else f"i-0waiting{i}/terminate/t"


def _refusing_to_wake(world: World, record_id: str) -> None:
    """SQS refuses the wake-up message of ``record_id`` (throttled), as the adapter raises it."""
    original = world.queues.send

    def send(worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        if message.wake and message.record_id == record_id:
            raise TransientError("sending work to the drain queue: throttled")
        original(worker, message, delay_seconds)

    world.queues.send = send  # type: ignore[method-assign]


def _asking(world: World, budget: DisruptionBudget, dispatcher: Dispatcher) -> AcquireSlot:
    """The slot step of a newcomer whose node is in the cluster."""
    cluster = FakeCluster(nodes={NODE: node()})
    return AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=budget,
        dispatcher=dispatcher,
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=world.records,
    )


def _polling(cluster: FakeCluster, budget: DisruptionBudget, dispatcher: Dispatcher) -> Evict:
    """The eviction step of a drain in progress, its instance running."""
    return Evict(
        cluster=cluster,
        slots=budget,
        dispatcher=dispatcher,
        instances=NoDns(known={INSTANCE: "running"}),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        time_left=no_end,
    )


def _wakes(world: World) -> list[tuple[str, Step, int]]:
    return [(s.message.record_id, s.message.step, s.delay) for s in world.queues.sent if s.message.wake]


def test_a_newcomers_ask_that_removes_an_expired_holder_wakes_the_waiter_first_in_line() -> None:
    # Given a budget of 1 held by a drain that died (its TTL passed a second ago), and a lifecycle waiting
    world = World()
    budget, dispatcher = _a_dead_drains_slot_and_a_waiter(world)
    step = _asking(world, budget, dispatcher)

    # When another lifecycle asks for a slot (its write removes the dead drain's holder)
    outcome = step(terminating(Step.ACQUIRE_SLOT), world.clock.now())

    # Then it waits behind the older waiter, which is woken at once (before: nobody was woken, and the freed
    # slot idled until the waiter's retry, BudgetRetrySeconds later)
    assert outcome.again
    assert _wakes(world) == [(WAITING, Step.ACQUIRE_SLOT, 0)]


def test_a_drains_renewal_that_removes_an_expired_holder_wakes_the_waiter_it_made_eligible() -> None:
    # Given a budget of 2: one slot held by a drain that died (its TTL passed a second ago), the other by a
    # drain in progress whose renewal is due (a third of its TTL passed), and a lifecycle waiting
    world = World()
    record = draining()
    budget, dispatcher = _a_dead_drains_slot_and_a_waiter(world, drain=record)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    step = _polling(cluster, budget, dispatcher)

    # When the drain polls, renewing its slot (its write removes the dead drain's holder)
    step(record, world.clock.now())

    # Then the waiter is woken at once
    assert _wakes(world) == [(WAITING, Step.ACQUIRE_SLOT, 0)]


def test_a_wake_up_sqs_refuses_fails_neither_the_drains_poll_nor_the_other_wake_ups() -> None:
    # Given a budget of 3: two slots held by drains that died (their TTL passed a second ago), the third by a
    # drain in progress whose renewal is due, two lifecycles waiting, and SQS refusing the first one's wake-up
    world = World()
    record = draining()
    budget, dispatcher = _a_dead_drains_slot_and_a_waiter(world, drain=record, waiters=2)
    _refusing_to_wake(world, WAITING)
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    step = _polling(cluster, budget, dispatcher)

    # When the drain polls, its renewal removing both dead drains' holders
    outcome = step(record, world.clock.now())

    # Then the poll goes on (its pod evicted, the next poll planned) and the second waiter is woken; the first
    # takes its slot at its own retry (before: the poll failed with the refusal, after its renewal was
    # written, and its retry, finding nothing to remove, woke nobody)
    assert outcome.again
    assert [name for name, _ in cluster.evictions] == ["web-1"]
    assert _wakes(world) == [(_waiting(2), Step.ACQUIRE_SLOT, 0)]


def test_a_wake_up_sqs_refuses_fails_neither_a_newcomers_ask_nor_the_other_wake_ups() -> None:
    # Given a budget of 2 held by two drains that died, two lifecycles waiting, and SQS refusing the first
    # one's wake-up
    world = World()
    budget, dispatcher = _a_dead_drains_slot_and_a_waiter(world, waiters=2)
    _refusing_to_wake(world, WAITING)
    step = _asking(world, budget, dispatcher)

    # When another lifecycle asks for a slot, removing both dead drains' holders
    outcome = step(terminating(Step.ACQUIRE_SLOT), world.clock.now())

    # Then it waits behind them (its place in line is written), and the second waiter is woken
    assert outcome.again
    assert outcome.changes["slot_waiting_since"] == world.clock.now()
    assert _wakes(world) == [(_waiting(2), Step.ACQUIRE_SLOT, 0)]
