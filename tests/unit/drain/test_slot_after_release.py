"""A late delivery of a lifecycle's ACQUIRE_SLOT, through the engine, after the lifecycle ended."""

from __future__ import annotations

import json
from dataclasses import replace

from nodecycle.domain.budget import DisruptionBudget, SlotRequest
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.engine import Handled, Outcome
from nodecycle.domain.model import LifecycleRecord, Step, adopted_token, record_id
from tests.support.fakes import T0, FakeAutoscaling, FakeMetrics
from tests.unit.budget.fakes import MemoryBudgetStore
from tests.unit.drain.test_drain_steps import INSTANCE, NODE, Ec2Maintenance, FakeCluster, FakeEvents, node
from tests.unit.drain.test_first_ask_wakeups import a_first_ask_under_a_budget_of_one
from tests.unit.foundation.test_engine import Script


def test_a_duplicate_delivery_whose_write_lost_to_the_whole_lifecycle_leaves_no_slot_behind() -> None:
    # Given a lifecycle at ACQUIRE_SLOT under a budget of one, and two deliveries of that step at once (a
    # release's wake next to the waiter's own retry)
    store = MemoryBudgetStore(max_attempts=8)  # the ConfigMap adapter's read-modify-write attempts
    world, record, budget, step = a_first_ask_under_a_budget_of_one(store)

    def the_other_delivery_runs_the_whole_lifecycle() -> None:
        # between this delivery's read of the budget and its write: an empty node is cordoned, drained,
        # completed and released within a second, and its record is done
        request = SlotRequest(
            node=NODE,
            instance_id=record.instance_id,
            zone="eu-west-1a",
            owner=record.owner,
            record_id=record.id,
            token=record.token,
        )
        assert budget.acquire(request).granted
        current = world.records.get(record.id)
        assert current is not None
        done = current.model_copy(update={"seq": current.seq + 1, "step": Step.DONE})
        assert world.records.commit(done, expected_seq=current.seq)
        budget.release(NODE, record.id)

    store.interleave(the_other_delivery_runs_the_whole_lifecycle)
    engine = world.engine({Step.ACQUIRE_SLOT: step, Step.CORDON: Script([Outcome.wait(5)])})

    # When this delivery runs (its write retried on the document after the release)
    handled = engine.handle(world.message())

    # Then its commit loses, and it took no slot that nothing would give back: the next node may drain
    assert handled is Handled.CONFLICT
    assert world.record().finished
    _left_no_slot_behind(budget, store, record)


def test_a_duplicate_delivery_whose_write_lost_to_the_lifecycle_and_its_instances_next_one_leaves_no_slot() -> (
    None
):
    # Given a lifecycle at ACQUIRE_SLOT under a budget of one, and two deliveries of that step at once
    store = MemoryBudgetStore(max_attempts=8)
    world, record, budget, step = a_first_ask_under_a_budget_of_one(store)
    request = SlotRequest(
        node=NODE,
        instance_id=record.instance_id,
        zone="eu-west-1a",
        owner=record.owner,
        record_id=record.id,
        token=record.token,
    )

    def the_other_delivery_runs_the_lifecycle_then_the_next_one_of_the_instance_runs() -> None:
        # between this delivery's read of the budget and its write: the lifecycle drains the node and gives
        # the slot back; the next lifecycle of the instance (a maintenance, in line for the node) takes it and
        # gives it back within seconds (the node is drained already)
        maintenance = replace(request, record_id=f"{record.instance_id}/scheduled-change", token="evt-1")
        assert budget.acquire(request).granted
        assert not budget.acquire(maintenance).granted
        current = world.records.get(record.id)
        assert current is not None
        done = current.model_copy(update={"seq": current.seq + 1, "step": Step.DONE})
        assert world.records.commit(done, expected_seq=current.seq)
        assert budget.release(NODE, record.id, record.token) == [maintenance.record_id]
        assert budget.acquire(maintenance).granted
        budget.release(NODE, maintenance.record_id, maintenance.token)

    store.interleave(the_other_delivery_runs_the_lifecycle_then_the_next_one_of_the_instance_runs)
    engine = world.engine({Step.ACQUIRE_SLOT: step, Step.CORDON: Script([Outcome.wait(5)])})

    # When this delivery runs (its write retried on the document after both releases)
    handled = engine.handle(world.message())

    # Then its commit loses, and it took no slot that nothing would give back: the next node may drain
    assert handled is Handled.CONFLICT
    assert world.record().finished
    _left_no_slot_behind(budget, store, record)


def _left_no_slot_behind(budget: DisruptionBudget, store: MemoryBudgetStore, record: LifecycleRecord) -> None:
    """No holder is left, and the next node takes the slot of the budget of one."""
    doc = store.read()
    assert doc is not None
    assert [(h.node, h.record_id) for h in doc.holders] == []
    other = SlotRequest(
        node="ip-10-0-9-9",
        instance_id="i-0other",
        zone="eu-west-1b",
        owner=record.owner,
        record_id="i-0other/terminate/t",
    )
    assert budget.acquire(other).granted


def test_a_duplicate_delivery_whose_write_lost_to_a_lifecycle_forgotten_then_cleaned_up_leaves_no_slot() -> (
    None
):
    # Given a lifecycle at ACQUIRE_SLOT under a budget of one (its instance terminates into the warm pool), and
    # two deliveries of that step at once
    store = MemoryBudgetStore(max_attempts=8)
    world, record, budget, step = a_first_ask_under_a_budget_of_one(store)
    progress = json.dumps({"instance": INSTANCE, "transition": "terminate", "token": record.token})
    cluster = FakeCluster(nodes={NODE: node(owner=record.owner, in_progress=progress)}, cordoned={NODE})
    cleanup = Cleanup(
        cluster=cluster,
        slots=budget,
        dispatcher=Dispatcher(
            records=world.records, queues=world.queues, clock=world.clock, metrics=FakeMetrics()
        ),
        autoscaling=FakeAutoscaling(states={INSTANCE: "Warmed:Stopped"}),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )

    def the_other_delivery_runs_the_lifecycle_and_the_instance_stops() -> None:
        # between this delivery's read of the budget and its write: the node is drained and the action
        # completed; Auto Scaling stops the instance into its warm pool, and its state change frees what
        # nodecycle held for it (FORGET_NODE) before the lifecycle's own CLEANUP runs; its record is done
        request = SlotRequest(
            node=NODE,
            instance_id=record.instance_id,
            zone="eu-west-1a",
            owner=record.owner,
            record_id=record.id,
            token=record.token,
        )
        assert budget.acquire(request).granted
        assert budget.forget(record.owner, record.instance_id) == []
        current = world.records.get(record.id)
        assert current is not None
        at_cleanup = current.model_copy(
            update={"step": Step.CLEANUP, "node": NODE, "destination": "WarmPool", "drain_started_at": T0}
        )
        cleanup(at_cleanup, world.clock.now())
        done = current.model_copy(update={"seq": current.seq + 1, "step": Step.DONE})
        assert world.records.commit(done, expected_seq=current.seq)

    store.interleave(the_other_delivery_runs_the_lifecycle_and_the_instance_stops)
    engine = world.engine({Step.ACQUIRE_SLOT: step, Step.CORDON: Script([Outcome.wait(5)])})

    # When this delivery runs (its write retried on the document after the forget and the cleanup)
    handled = engine.handle(world.message())

    # Then its commit loses, and it took no slot that nothing would give back (only the sweeper, minutes
    # later): the next node may drain
    assert handled is Handled.CONFLICT
    assert world.record().finished
    _left_no_slot_behind(budget, store, record)


def test_an_adopted_lifecycle_started_again_on_its_record_takes_the_slot_its_earlier_one_gave_back() -> None:
    # Given an adopted lifecycle (one record per instance and hook, token adopted:<hook>) that drained the node
    # and gave its slot back under a budget of one
    world, record, budget, step = a_first_ask_under_a_budget_of_one()
    token = adopted_token(record.hook)
    earlier = record.model_copy(
        update={"token": token, "id": record_id(record.instance_id, record.transition, token)}
    )
    assert not step(earlier, world.clock.now()).again
    world.clock.advance(60)
    budget.release(NODE, earlier.id, earlier.token)

    # When the instance, back from its warm pool, is held again under the hook a minute later (well within the
    # holder TTL): the sweeper adopts the action, and its lifecycle starts again on the same record and token
    world.clock.advance(60)
    again = earlier.model_copy(update={"seq": earlier.seq + 1, "received_at": world.clock.now()})
    late = step(earlier, world.clock.now())  # a late delivery of the earlier lifecycle's step, meanwhile
    restarted = step(again, world.clock.now())

    # Then a late delivery of the earlier lifecycle is still refused; the new lifecycle takes the slot, as the
    # lifecycle it is, not the one that gave it back
    assert late.again
    assert not restarted.again
