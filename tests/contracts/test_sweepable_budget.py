"""The budget as the sweeper sweeps it: FakeBudget (tests/unit/sweeper/test_sweeper.py) and DisruptionBudget
(over the ConfigMap's stand-in, MemoryBudgetStore, whose contract is tests/contracts/test_budget_store.py)
answer alike.

What the sweeper relies on: its judge (``stale``) is asked about this owner's live entries only, never about
another owner's, nor about expired ones (which go unjudged), and not at all when there is none; the holders
removed are those it judged stale and the expired ones, never another owner's, nor one it left unjudged."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Protocol

import pytest

from nodecycle.domain.budget import BudgetDocument, BudgetLimits, DisruptionBudget, Verdict
from nodecycle.domain.budget.document import Holder, Waiter
from nodecycle.domain.budget.service import SweepResult
from nodecycle.domain.policy import Quantity
from tests.support.fakes import T0, FakeClock
from tests.unit.budget.fakes import FakeInventory, MemoryBudgetStore, RecordingMetrics, node
from tests.unit.sweeper.test_sweeper import FakeBudget, entry

OWNER = "stack-a"
TTL = 300  # seconds: the entries' (entry() writes them renewed at T0)


def holders() -> list[Holder]:
    return [
        entry("n1", "i-1/terminate/a", "i-1"),  # live, judged stale
        entry("n2", "i-2/terminate/b", "i-2"),  # live, kept
        entry("n3", "i-3/terminate/c", "i-3").model_copy(update={"renewed_at": T0 - timedelta(seconds=TTL)}),
        entry("n4", "i-4/terminate/d", "i-4").model_copy(update={"owner": "stack-b"}),  # another owner's
    ]


class Sweepable(Protocol):
    def sweep(self, *, stale: Callable[[Sequence[Holder | Waiter]], Verdict]) -> SweepResult: ...


def real(entries: list[Holder]) -> DisruptionBudget:
    store = MemoryBudgetStore()
    store.text = BudgetDocument(holders=tuple(entries)).to_json()
    return DisruptionBudget(
        store=store,
        nodes=FakeInventory([node(f"n{i}") for i in range(1, 5)]),
        clock=FakeClock(T0),
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("4"), None),
        holder_ttl=timedelta(seconds=TTL),
        count_unavailable=False,
        owner=OWNER,
    )


@pytest.fixture(params=["fake", "budget"])
def make(request: pytest.FixtureRequest) -> Callable[[list[Holder]], Sweepable]:
    if request.param == "fake":
        return lambda entries: FakeBudget(entries, owner=OWNER, now=T0)
    return real


def test_the_judge_is_asked_about_the_owners_live_entries_only(
    make: Callable[[list[Holder]], Sweepable],
) -> None:
    asked: list[set[str]] = []

    def stale(entries: Sequence[Holder | Waiter]) -> Verdict:
        asked.append({e.record_id for e in entries})
        return Verdict(stale=frozenset({"i-1/terminate/a"}))

    result = make(holders()).sweep(stale=stale)

    assert asked == [{"i-1/terminate/a", "i-2/terminate/b"}]
    assert {h.node for h in result.holders} == {"n1", "n3"}  # judged stale; expired


def test_the_judge_is_not_asked_when_the_owner_has_no_live_entry(
    make: Callable[[list[Holder]], Sweepable],
) -> None:
    asked: list[Sequence[Holder | Waiter]] = []

    def stale(entries: Sequence[Holder | Waiter]) -> Verdict:
        asked.append(entries)
        return Verdict()

    result = make([h for h in holders() if h.node in ("n3", "n4")]).sweep(stale=stale)

    assert asked == []
    assert [h.node for h in result.holders] == ["n3"]


def test_an_entry_left_unjudged_is_kept(make: Callable[[list[Holder]], Sweepable]) -> None:
    # (the judge had no time to read its lifecycle's record, or the read was refused)
    def stale(entries: Sequence[Holder | Waiter]) -> Verdict:
        return Verdict(stale=frozenset({"i-1/terminate/a"}), unjudged=frozenset({"i-2/terminate/b"}))

    result = make(holders()).sweep(stale=stale)

    assert {h.node for h in result.holders} == {"n1", "n3"}  # n2, unjudged, kept
