"""Wake-ups around a lifecycle's first ask for a budget slot: the slot freed for it is taken within about a
second, whatever the order of the ask's writes and the release."""

from __future__ import annotations

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
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, FakeEvents, NoDns, node, policy, terminating
from tests.unit.foundation.test_engine import PLAN, World, make_record

OTHER = "i-0other/terminate/t"


def a_first_ask_under_a_budget_of_one(
    store: MemoryBudgetStore | None = None,
) -> tuple[World, LifecycleRecord, DisruptionBudget, AcquireSlot]:
    """A lifecycle at its first ask for a slot (slot_waiting_since None), the real AcquireSlot step, and a
    budget of one on ``store``."""
    world = World()
    record = terminating(Step.ACQUIRE_SLOT)
    world.records.create(record)
    budget = DisruptionBudget(
        store=store or MemoryBudgetStore(),
        nodes=FakeInventory(),
        clock=world.clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("1")),
        holder_ttl=timedelta(seconds=600),
        count_unavailable=False,
        owner=record.owner,
    )
    cluster = FakeCluster(nodes={NODE: node()})
    step = AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=budget,
        dispatcher=Dispatcher(
            records=world.records, queues=world.queues, clock=world.clock, metrics=FakeMetrics()
        ),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=world.records,
    )
    return world, record, budget, step


def _a_first_ask_under_a_full_budget() -> tuple[
    World, LifecycleRecord, DisruptionBudget, AcquireSlot, Dispatcher
]:
    """A lifecycle at its first ask for a slot, under a budget of one another node of the stack holds."""
    world, record, budget, step = a_first_ask_under_a_budget_of_one()
    holder = SlotRequest(
        node="ip-10-0-9-9", instance_id="i-0other", zone="eu-west-1b", owner=record.owner, record_id=OTHER
    )
    assert budget.acquire(holder).granted
    waker = Dispatcher(records=world.records, queues=world.queues, clock=world.clock, metrics=FakeMetrics())
    return world, record, budget, step, waker


def test_a_waiter_woken_while_its_first_ask_is_in_flight_is_woken() -> None:
    world, record, budget, step, waker = _a_first_ask_under_a_full_budget()

    # Given a lifecycle at its first ask for a slot, under a full budget
    def ask_then_the_holder_releases(rec: LifecycleRecord, now: datetime) -> Outcome:
        outcome = step(rec, now)  # denied: no room; its waiter is written to the ConfigMap
        assert outcome.again
        # the other drain's CLEANUP, between this write and this step's commit to DynamoDB (tens of ms)
        woken = budget.release("ip-10-0-9-9", OTHER)
        assert woken == [record.id]  # the budget names our waiter as the one to wake
        for rid in woken:
            waker.wake(rid)
        return outcome

    # When its first ask is denied, and the holder releases while that ask's commit is in flight
    steps: dict[Step, object] = {Step.ACQUIRE_SLOT: ask_then_the_holder_releases}
    world.engine(steps).handle(world.message(record.id))

    sent = [(s.message.step, s.message.wake, s.delay) for s in world.queues.take()]
    # Then it is woken at once (the wake-up, overtaken by its own commit, runs): the freed slot is reused
    # within about a second, not at its retry 30 s later
    assert (Step.ACQUIRE_SLOT, True, 0) in sent, f"no wake-up: only {sent} -> the free slot idles 30 s"


def test_a_first_ask_granted_whose_commit_lost_to_a_duplicates_wait_wakes_it() -> None:
    # Two deliveries of the first ask (SQS at-least-once): the one committed "wait" (slot_waiting_since set),
    # the other, after a release, was granted the slot but lost its commit
    world = World()
    world.records.create(make_record(PLAN))  # first ask: slot_waiting_since None

    def duplicate_commits_wait_first(rec: LifecycleRecord, now: datetime) -> Outcome:
        waited = rec.model_copy(
            update={"seq": rec.seq + 1, "due_at": now + timedelta(seconds=30), "slot_waiting_since": now}
        )
        assert world.records.commit(waited, expected_seq=rec.seq)
        return Outcome.next()  # the slot is ours in the budget document

    # When the granted one's commit loses
    world.engine({Step.ACQUIRE_SLOT: duplicate_commits_wait_first}).handle(world.message())

    # Then the lifecycle, holding a slot it does not know of, is woken at once
    sent = [(s.message.seq, s.message.wake, s.delay) for s in world.queues.take()]
    assert sent == [(world.record().seq, True, 0)], f"sent {sent}: the held slot idles until the 30 s retry"
