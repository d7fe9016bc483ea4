"""A slot passed on to a waiter whose wake-up SQS refused: how long it idles before the waiter takes it. On the
real budget service (in memory), whose writes pass slots on (see rules.pass_on)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotRequest
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.drain.forget import ForgetNode
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step, Transition
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import Quantity
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    Ec2Maintenance,
    FakeCluster,
    FakeEvents,
    NoDns,
    node,
    policy,
    spot,
    terminating,
)
from tests.unit.foundation.test_engine import World

WAITING = "i-0waiting/terminate/t"
HOLDING = f"{INSTANCE}/terminate/t1"


def _held_and_waited_for(world: World) -> DisruptionBudget:
    """A budget of 1 slot, held by a drain of INSTANCE's node (lifecycle HOLDING), and a lifecycle of the stack
    (WAITING) waiting for it since 30 s later; the time is 31 s after that."""
    owner = terminating(Step.ACQUIRE_SLOT).owner
    budget = DisruptionBudget(
        store=MemoryBudgetStore(),
        nodes=FakeInventory(),
        clock=world.clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("1")),
        holder_ttl=timedelta(seconds=600),
        count_unavailable=False,
        owner=owner,
    )
    assert budget.acquire(SlotRequest(NODE, INSTANCE, "eu-west-1a", owner, HOLDING, token="t1")).granted
    world.clock.advance(30)
    waiter = terminating(
        Step.ACQUIRE_SLOT,
        id=WAITING,
        instance_id="i-0waiting",
        slot_waiting_since=world.clock.now(),
        due_at=world.clock.now() + timedelta(seconds=120),
    )
    world.records.create(waiter)
    asking = SlotRequest("ip-10-0-8-8", "i-0waiting", "eu-west-1c", owner, WAITING)
    assert not budget.acquire(asking).granted
    world.clock.advance(31)
    return budget


def _refusing_to_wake_once(world: World, record_id: str) -> None:
    """SQS refuses the first wake-up message of ``record_id`` (throttled), as the adapter raises it."""
    original = world.queues.send
    refused: list[WorkMessage] = []

    def send(worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        if message.wake and message.record_id == record_id and not refused:
            refused.append(message)
            raise TransientError("sending work to the wake queue: throttled")
        original(worker, message, delay_seconds)

    world.queues.send = send  # type: ignore[method-assign]


def _wakes(world: World) -> list[str]:
    return [s.message.record_id for s in world.queues.sent if s.message.wake]


def test_a_forget_retried_after_a_refused_wake_up_wakes_the_waiter_it_passed_the_slot_on_to() -> None:
    # Given the slot of an instance that was terminated without its hook, mid-drain, and a lifecycle waiting
    # for it; SQS refuses that lifecycle's first wake-up
    world = World()
    budget = _held_and_waited_for(world)
    _refusing_to_wake_once(world, WAITING)
    progress = json.dumps({"instance": INSTANCE, "transition": "terminate", "token": "t1"})
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress=progress)})
    waker = Dispatcher(records=world.records, queues=world.queues, clock=world.clock, metrics=FakeMetrics())
    step = ForgetNode(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=budget,
        dispatcher=waker,
        instances=NoDns(),
        policy=policy(),
    )
    record = spot(Step.FORGET_NODE, transition=Transition.STATE_CHANGE, id=f"{INSTANCE}/state-change")

    # When the state change's step forgets the instance (its write passes the slot on to the waiter), and
    # fails with the refused wake-up
    with pytest.raises(TransientError):
        step(record, world.clock.now())
    assert budget.snapshot().holders[0].record_id == WAITING

    # Then its retry, a second later, wakes the waiter (before: the retry removed nothing, and woke only the
    # waiters eligible then, which the one holding its passed slot no longer is: that slot idled until the
    # waiter's own ask, up to 4 x BudgetRetrySeconds later)
    world.clock.advance(1)
    assert step(record, world.clock.now()).changes["outcome"] == "instance-gone-without-hook"
    assert _wakes(world) == [WAITING]


def test_a_release_that_passes_two_slots_wakes_the_second_waiter_though_sqs_refused_the_first_ones_wake_up() -> (
    None
):
    # Given a drained node's cleanup whose release passes two slots on at once (its own, and an expired holder's it
    # removes in the same write) to two waiting lifecycles, and SQS refusing the first one's wake-up (throttled);
    # on the real budget: a budget of 2 slots, one taken 300 s before the cleanup's by a drain that never renewed it
    cluster = FakeCluster(nodes={NODE: node(owner="stack-a", in_progress="{}")})
    records, queues, clock = InMemoryRecords(), RecordingQueues(), FakeClock(T0)
    cleaning = terminating(Step.CLEANUP, node=NODE)
    budget = DisruptionBudget(
        store=MemoryBudgetStore(),
        nodes=FakeInventory(),
        clock=clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("2")),
        holder_ttl=timedelta(seconds=600),
        count_unavailable=False,
        owner=cleaning.owner,
    )
    stale = SlotRequest(
        "ip-10-0-9-9", "i-0stale", "eu-west-1b", cleaning.owner, "i-0stale/terminate/s", token="s"
    )
    assert budget.acquire(stale).granted
    clock.advance(300)
    mine = SlotRequest(NODE, INSTANCE, "eu-west-1a", cleaning.owner, cleaning.id, token=cleaning.token)
    assert budget.acquire(mine).granted
    first, second = (
        terminating(
            Step.ACQUIRE_SLOT, id=f"i-0{n:016x}/terminate/t{n}", seq=3, slot_waiting_since=clock.now()
        )
        for n in (1, 2)
    )
    for n, waiter in enumerate((first, second), start=1):
        records.create(waiter)
        clock.advance(1)
        asking = SlotRequest(f"ip-10-0-7-{n}", waiter.instance_id, "eu-west-1c", cleaning.owner, waiter.id)
        assert not budget.acquire(asking).granted
    clock.advance(300)  # the stale holder expired; the cleanup's own slot has not
    original = queues.send

    def send(worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None:
        if message.wake and message.record_id == first.id:
            raise TransientError("sending work to the wake queue: throttled")
        original(worker, message, delay_seconds)

    queues.send = send  # type: ignore[method-assign]
    step = Cleanup(
        cluster=cluster,
        slots=budget,
        dispatcher=Dispatcher(records=records, queues=queues, clock=clock, metrics=FakeMetrics()),
        autoscaling=FakeAutoscaling(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )

    # When the cleanup runs: it fails, to be retried (its repeated release wakes the first waiter again)
    with pytest.raises(TransientError):
        step(cleaning, clock.now())
    assert {holder.record_id for holder in budget.snapshot().holders} == {first.id, second.id}

    # Then the second waiter was sent its wake-up at once (before: the loop stopped at the first refusal, and its slot
    # idled until the cleanup's retry)
    assert [s.message.record_id for s in queues.sent if s.message.wake] == [second.id]
