"""A slot passed on to a waiter whose container's clock runs a little ahead of the releaser's.

Lambda containers stamp the budget on their own clocks. The store moves a writer's stamps onto the reader's
clock only past CLOCK_TOLERANCE (2 s, adapters/kube/budget.py): below it, a waiter's renewal written by a
container 1.5 s ahead stays 1.5 s ahead in every other writer's view. The chaos campaign draws such skews
(sandbox/nodecycle_sandbox/chaos/plan.py: ``clock-skew`` of 1 to 8 s).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotReason
from nodecycle.domain.policy import Quantity
from tests.unit.budget.conftest import TTL
from tests.unit.budget.fakes import FakeClock, FakeInventory, MemoryBudgetStore, RecordingMetrics, slot


class _Ahead:
    """A container's clock that runs ``seconds`` ahead of ``clock``."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        self._clock = clock
        self._ahead = timedelta(seconds=seconds)

    def now(self) -> datetime:
        return self._clock.now() + self._ahead


def _budget(
    store: MemoryBudgetStore, clock: FakeClock | _Ahead, inventory: FakeInventory, metrics: RecordingMetrics
) -> DisruptionBudget:
    return DisruptionBudget(
        store=store,
        nodes=inventory,
        clock=clock,
        metrics=metrics,
        limits=BudgetLimits(Quantity.parse("1"), None),
        holder_ttl=TTL,
        count_unavailable=False,
        owner="blue",
    )


def test_a_release_repeated_after_its_wake_up_was_lost_wakes_a_waiter_whose_clock_runs_ahead(
    store: MemoryBudgetStore, clock: FakeClock, inventory: FakeInventory, metrics: RecordingMetrics
) -> None:
    # Given a budget of 1 held by n1, and n2 joining the line from a container whose clock runs 1.5 s ahead
    releaser = _budget(store, clock, inventory, metrics)
    waiter = _budget(store, _Ahead(clock, 1.5), inventory, metrics)
    assert releaser.acquire(slot("n1")).granted
    assert not waiter.acquire(slot("n2")).granted

    # When n1's lifecycle releases half a second later, passing the slot on to n2, and dies before the wake-up
    clock.advance(0.5)
    assert releaser.release("n1", "rec-n1") == ["rec-n2"]

    # Then the release delivered again wakes n2 again: its lifecycle has not asked since the pass (its place's
    # renewal, stamped ahead, is no ask after it), and otherwise the slot idles until n2's own retry, up to
    # 4 x BudgetRetrySeconds later
    clock.advance(5)
    assert releaser.release("n1", "rec-n1") == ["rec-n2"]
    # and n2, woken, finds the slot held for it
    assert waiter.acquire(slot("n2")).reason is SlotReason.HELD
