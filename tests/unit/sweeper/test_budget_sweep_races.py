"""The budget part of the sweep racing the live path: the real DisruptionBudget over the ConfigMap's stand-in
(MemoryBudgetStore, whose ``interleave`` runs another writer between the sweep's read and its write)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.budget import BudgetDocument, BudgetLimits, DisruptionBudget
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.model import Step
from nodecycle.domain.policy import Quantity
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.sweep_time import SweepTime
from tests.support.fakes import T0, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics, node
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import AliveInstances, entry

RECORD = "i-1/scheduled/maintenance"


def test_a_slot_its_restarted_lifecycle_took_while_the_sweep_judged_the_old_one_over_is_kept() -> None:
    # Given a slot of this owner on n1 left by a lifecycle that is over (its cleanup never gave it back), and
    # the sweep judging it stale from its record (finished)
    clock = FakeClock(T0)
    records = InMemoryRecords()
    records.create(make_record(PLAN, Step.DONE, id=RECORD, instance_id="i-1"))
    store = MemoryBudgetStore()
    store.text = BudgetDocument(holders=(entry("n1", RECORD, "i-1"),)).to_json()
    budget = DisruptionBudget(
        store=store,
        nodes=FakeInventory([node("n1"), node("n2")]),
        clock=clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("1"), None),
        holder_ttl=timedelta(seconds=300),
        count_unavailable=False,
        owner="stack-a",
    )

    # When, between the sweep's read of the budget and its write, the record starts over (the instance's next
    # maintenance, on the same record id) and its new lifecycle takes n1's slot (a write of the document)
    def restarted() -> None:
        old = records.get(RECORD)
        assert old is not None
        records.commit(
            old.model_copy(update={"seq": old.seq + 1, "step": PLAN[0], "token": "next"}),
            expected_seq=old.seq,
        )
        clock.advance(5)
        taken = entry("n1", RECORD, "i-1").model_copy(
            update={"token": "next", "acquired_at": clock.now(), "renewed_at": clock.now()}
        )
        store.text = BudgetDocument(holders=(taken,)).to_json()
        store.version += 1

    store.interleave(restarted)
    part = StaleBudgetEntries(
        budget=budget,
        records=records,
        node_names=lambda: {"n1", "n2"},
        alive_instances=AliveInstances({"i-1"}),
        waker=Dispatcher(records=records, queues=RecordingQueues(), clock=clock, metrics=FakeMetrics()),
    )
    part([], clock.now(), SweepTime(lambda: 300.0, timedelta(seconds=45)))

    # Then the new lifecycle's slot is still there: the sweep judged an entry that is no longer in the budget
    doc = store.read()
    assert doc is not None
    holder = doc.holder("n1")
    assert holder is not None
    assert holder.token == "next"
