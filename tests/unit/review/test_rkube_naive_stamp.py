"""A budget document whose stamps carry no offset (edited by hand, or put back by a tool that drops it): every
writer stamps on UTC, so they are read on UTC. Kept naive, the first comparison with the clock's time raised
TypeError, at every decision of every owner, the budget stuck until a person found the stamp."""

from __future__ import annotations

import json
from datetime import timedelta

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotReason
from nodecycle.domain.policy import Quantity
from tests.unit.budget.fakes import (
    START,
    FakeClock,
    FakeInventory,
    MemoryBudgetStore,
    RecordingMetrics,
    slot,
)


def test_a_holder_stamped_without_an_offset_is_read_on_utc() -> None:
    store = MemoryBudgetStore()
    blue = DisruptionBudget(
        store=store,
        nodes=FakeInventory(),
        clock=FakeClock(),
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("1"), None),
        holder_ttl=timedelta(seconds=300),
        count_unavailable=False,
        owner="blue",
    )
    assert blue.acquire(slot("n0")).granted
    data = json.loads(store.text or "")
    naive = START.replace(tzinfo=None).isoformat()
    data["holders"][0]["renewedAt"] = data["holders"][0]["acquiredAt"] = naive
    store.text = json.dumps(data)

    # the holder read as renewed now, on UTC: it keeps its slot, its stamps written back with their offset
    assert blue.acquire(slot("n1")).reason is SlotReason.NO_ROOM
    written = json.loads(store.text or "")["holders"][0]
    assert (written["renewedAt"], written["acquiredAt"]) == (naive + "Z", naive + "Z")
