"""The budget part of the sweep against what may run between its read of the budget and its write, on the real
DisruptionBudget over MemoryBudgetStore (whose ``interleave`` runs another writer there): a holder renewing while
it is judged, a second sweep of the same owner (EventBridge firing twice), a node re-registered under the same
name, the ConfigMap deleted."""

from __future__ import annotations

import pytest

from nodecycle.adapters.kube.budget import BudgetNotInstalled
from nodecycle.domain.budget import SlotRequest
from nodecycle.domain.model import Step
from nodecycle.domain.sweep.sweep_time import OutOfTime
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_budget_sweep_faults import OWNER, World, rid


def ask(world: World, name: str, instance: str | None = None) -> None:
    world.budget.acquire(
        SlotRequest(
            node=name,
            instance_id=instance or f"i-{name}",
            zone="a",
            owner=OWNER,
            record_id=rid(name),
            token=name,
        )
    )


def test_a_holder_that_renews_while_it_is_judged_keeps_its_slot() -> None:
    # Given a budget of 1 held by n1, whose lifecycle began after the sweep listed the open ones (its record is
    # read: open), and n2 waiting; n1's renewal is due (a third of its TTL passed)
    world = World()
    world.lifecycle("n1")
    world.lifecycle("n2")
    world.open_ids.clear()
    snapshot = world.open_records()
    world.clock.advance(200)
    world.queues.take()

    # When n1 renews its slot between the sweep's read and its write
    world.store.interleave(lambda: ask(world, "n1"))
    world.part()(snapshot, world.clock.now(), world.time(300, 45))

    # Then n1 still holds it, n2 still waits, and nobody was woken
    assert world.holders() == ["n1"]
    assert world.waiters() == ["n2"]
    assert world.woken() == []


def test_a_second_sweep_between_the_first_ones_read_and_write_frees_and_passes_each_slot_once() -> None:
    # Given a budget of 1 held by n1, whose lifecycle is over, and n2 and n3 waiting (open)
    world = World()
    world.lifecycle("n1", over=True)
    n2 = world.lifecycle("n2")
    world.lifecycle("n3")
    world.queues.take()

    # When a second sweep of the same owner (EventBridge fired twice) runs between the first one's read and its
    # write
    second = world.part()
    world.store.interleave(lambda: second(world.open_records(), world.clock.now(), world.time(300, 45)))
    world.part()(world.open_records(), world.clock.now(), world.time(300, 45))

    # Then n1's slot went to n2 once, n3 still waits, and n2 was woken once
    assert world.holders() == ["n2"]
    assert world.waiters() == ["n3"]
    assert world.woken() == [n2]


def test_a_node_name_taken_again_by_a_new_instance_keeps_the_new_lifecycles_slot() -> None:
    # Given n1 of instance i-n1, terminated (its lifecycle over, its cleanup died), and n1's name taken again by
    # a new instance's node (a recycled private IP), whose lifecycle took n1's slot under its own record (the
    # budget's claim drops another instance's entries of the node); the sweep judges the document read before
    world = World()
    world.lifecycle("n1", over=True)
    new = make_record(
        PLAN, Step.ACQUIRE_SLOT, id="i-new/terminate/new", instance_id="i-new", node="n1", token="new"
    )
    world.records.create(new)
    world.open_ids.add(new.id)
    world.queues.take()

    def new_lifecycle_asks() -> None:
        world.budget.acquire(
            SlotRequest(node="n1", instance_id="i-new", zone="a", owner=OWNER, record_id=new.id, token="new")
        )

    # When the new lifecycle takes n1's slot between the sweep's read and its write, and the sweep, which judged
    # i-n1's entry stale (EC2: i-n1 gone), writes
    world.store.interleave(new_lifecycle_asks)
    counts = world.part(alive=lambda ids: set(ids) & {"i-new"})(
        world.open_records(), world.clock.now(), world.time(300, 45)
    )

    # Then the new lifecycle's slot on the same name is kept: the sweep removes only the entry it judged
    doc = world.store.read()
    assert doc is not None
    assert [(h.node, h.instance_id) for h in doc.holders] == [("n1", "i-new")]
    assert counts["SweptHolders"] == 0


def test_the_budget_configmap_deleted_mid_sweep_removes_nothing_and_wakes_nobody() -> None:
    # Given a budget of 1 held by n1, whose lifecycle is over, and n2 waiting
    world = World()
    world.lifecycle("n1", over=True)
    world.lifecycle("n2")
    world.queues.take()

    # When the ConfigMap is deleted between the sweep's read and its write
    world.store.interleave(world.store.uninstall)
    # Then the sweep fails naming it (not silent: every drain's ask fails meanwhile)
    with pytest.raises(BudgetNotInstalled):
        world.part()(world.open_records(), world.clock.now(), world.time(300, 45))

    # and it writes nothing (it does not create the ConfigMap), and wakes nobody
    assert world.store.text is None
    assert world.woken() == []


def test_a_sweep_cut_short_by_a_conflict_judges_nothing_again() -> None:
    # Given a budget of 1 held by n1, whose lifecycle is over, n2 whose lifecycle is over too, n3 open, and time
    # for one record read
    world = World()
    world.lifecycle("n1", over=True)
    world.lifecycle("n2", over=True)
    world.lifecycle("n3")
    world.queues.take()

    # When another writer's write conflicts with the sweep's (n3 asks again, its renewal due)
    world.clock.advance(200)
    world.store.interleave(lambda: ask(world, "n3"))
    with pytest.raises(OutOfTime):
        world.part()(world.open_records(), world.clock.now(), world.time(left=60, reserve=15, held_back=40))

    # Then what was judged holds on the document read again: n1 freed, its slot to n3 (it renewed), n2 aside
    assert world.holders() == ["n3"]
    assert world.waiters() == ["n2"]
