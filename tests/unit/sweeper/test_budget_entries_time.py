"""The budget part of the sweep within its time: many stale entries whose records are read one by one."""

from __future__ import annotations

import pytest

from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.sweep.budget_entries import StaleBudgetEntries
from nodecycle.domain.sweep.sweep_time import RESERVE, SHARES, OutOfTime, SweepTime
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import AliveInstances, FakeBudget, entry


def test_a_budget_part_with_more_records_to_read_than_its_time_allows_stops_and_keeps_what_it_judged() -> (
    None
):
    # Given forty budget entries of lifecycles that are over, none among the sweep's open records, whose nodes
    # and instances are still there (each record must be read), each read throttled for 10 s, and the budget
    # part's time as the sweeper gives it (the reserve and the shares of the parts after it)
    records = InMemoryRecords()
    ids = [f"i-{n}/terminate/x" for n in range(40)]
    for record_id in ids:
        records.create(make_record(PLAN, Step.DONE, id=record_id, instance_id=record_id.split("/")[0]))
    budget = FakeBudget([entry(f"n{n}", record_id, f"i-{n}") for n, record_id in enumerate(ids)])
    clock = FakeClock()
    began = clock.now()
    get = records.get

    def throttled(record_id: str) -> LifecycleRecord | None:
        clock.advance(10)
        return get(record_id)

    records.get = throttled  # type: ignore[method-assign]
    part = StaleBudgetEntries(
        budget=budget,
        records=records,
        node_names=lambda: {f"n{n}" for n in range(40)},
        alive_instances=AliveInstances({f"i-{n}" for n in range(40)}),
        waker=Dispatcher(records=records, queues=RecordingQueues(), clock=clock, metrics=FakeMetrics()),
    )
    later = SHARES["annotations"] + SHARES["addresses"]
    time_left = 120.0

    def left() -> float:
        return time_left - (clock.now() - began).total_seconds()

    # When the sweep's budget part runs with 120 s left
    with pytest.raises(OutOfTime, match="budget entries not judged"):
        part([], began, SweepTime(left, RESERVE + later))

    # Then it stopped reading records while its time was left (before: it read all forty, 400 s, past the
    # invocation's timeout), the entries it judged are swept and the others kept for the next sweep
    assert left() >= (RESERVE + later).total_seconds() - 10
    swept = [node for node, doomed in budget.judged.items() if doomed]
    assert swept == [f"n{n}" for n in range(len(swept))]
    assert 0 < len(swept) < 40
    assert not any(doomed for node, doomed in budget.judged.items() if node not in swept)
