"""A budget write whose answer is lost and that lands only after its read back (a client's read timeout while the
API server still holds the request, an etcd proposal that commits after the handler gave up): the read back shows
the document it was decided on, and the write is told as not landed (a plain TransientError, see
DisruptionBudget._landed), though it lands. What the step's retry, deciding on what is there then, makes of it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from nodecycle.domain.budget import BudgetDocument, BudgetLimits, DisruptionBudget, SlotReason
from nodecycle.domain.budget.errors import WriteOutcomeUnknown
from nodecycle.domain.errors import TransientError
from nodecycle.domain.policy import Quantity
from tests.unit.budget.fakes import FakeClock, FakeInventory, MemoryBudgetStore, RecordingMetrics, slot


class LateStore(MemoryBudgetStore):
    """A store whose next write lands only when :meth:`land` is called; its writer told WriteOutcomeUnknown."""

    def __init__(self) -> None:
        super().__init__()
        self._late = False
        self._pending: str | None = None

    def land_late(self) -> None:
        self._late = True

    def land(self) -> None:
        assert self._pending is not None
        self.text, self._pending = self._pending, None
        self.version += 1

    def update[T](self, mutate: Callable[[BudgetDocument | None], tuple[BudgetDocument | None, T]]) -> T:
        if not self._late:
            return super().update(mutate)
        self._late = False
        new, _ = mutate(self.read())
        assert new is not None
        self._pending = new.to_json()
        raise WriteOutcomeUnknown("read timed out (the request still on the API server)")


@pytest.fixture
def store() -> LateStore:
    return LateStore()


def budget(store: LateStore, clock: FakeClock) -> DisruptionBudget:
    return DisruptionBudget(
        store=store,
        nodes=FakeInventory(),
        clock=clock,
        metrics=RecordingMetrics(),
        limits=BudgetLimits(Quantity.parse("1"), None),
        holder_ttl=timedelta(seconds=300),
        count_unavailable=False,
        owner="blue",
    )


def test_a_release_told_not_landed_that_lands_wakes_its_waiter_at_its_retry(store: LateStore) -> None:
    clock = FakeClock()
    blue = budget(store, clock)
    assert blue.acquire(slot("n0")).granted
    assert blue.acquire(slot("n1")).reason is SlotReason.NO_ROOM
    clock.advance(5)
    store.land_late()
    with pytest.raises(TransientError):
        blue.release("n0", "rec-n0")
    store.land()  # n1 holds the slot, woken by nobody
    assert [h.node for h in blue.snapshot().holders] == ["n1"]

    clock.advance(10)
    assert blue.release("n0", "rec-n0") == ["rec-n1"]  # the cleanup's retry


def test_a_grant_told_not_landed_that_lands_is_the_drains_at_its_retry(store: LateStore) -> None:
    clock = FakeClock()
    blue = budget(store, clock)
    store.land_late()
    with pytest.raises(TransientError):
        blue.acquire(slot("n0"))
    store.land()

    clock.advance(10)
    again = blue.acquire(slot("n0"))
    assert again.granted
    assert again.reason is SlotReason.HELD
