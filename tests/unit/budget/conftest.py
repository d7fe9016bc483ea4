from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, Lifecycles
from nodecycle.domain.policy import Quantity
from tests.unit.budget.fakes import (
    BudgetFactory,
    FakeClock,
    FakeInventory,
    MemoryBudgetStore,
    RecordingMetrics,
)

TTL = timedelta(seconds=300)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store() -> MemoryBudgetStore:
    return MemoryBudgetStore()


@pytest.fixture
def metrics() -> RecordingMetrics:
    return RecordingMetrics()


@pytest.fixture
def inventory() -> FakeInventory:
    return FakeInventory()


@pytest.fixture
def make_budget(
    store: MemoryBudgetStore, clock: FakeClock, metrics: RecordingMetrics, inventory: FakeInventory
) -> BudgetFactory:
    """A budget on the shared store; every owner of a test shares the store, the clock and the nodes."""

    def make(
        total: str = "4",
        per_zone: str | None = "2",
        *,
        owner: str = "blue",
        count_unavailable: bool = False,
        ttl: timedelta = TTL,
        nodes: FakeInventory | None = None,  # a container's own node cache (default: the shared nodes)
        lifecycles: Lifecycles | None = None,
    ) -> DisruptionBudget:
        return DisruptionBudget(
            store=store,
            nodes=nodes or inventory,
            clock=clock,
            metrics=metrics,
            limits=BudgetLimits(
                Quantity.parse(total), None if per_zone is None else Quantity.parse(per_zone)
            ),
            holder_ttl=ttl,
            count_unavailable=count_unavailable,
            owner=owner,
            lifecycles=lifecycles,
        )

    return make
