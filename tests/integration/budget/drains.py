"""Budget clients for concurrent tests: one per thread, each with its own ApiClient, as separate Lambdas."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from kubernetes import client

from nodecycle.adapters.kube.budget import ConfigMapBudgetStore, KubeNodeInventory
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotDecision, SlotRequest
from nodecycle.domain.errors import TransientError
from nodecycle.domain.policy import Quantity
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import NAMESPACE, core_api


class WallClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


@dataclass
class SharedMetrics:
    """Metrics of every thread, summed."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    totals: dict[str, float] = field(default_factory=dict)

    def count(self, name: str, value: float = 1, **dimensions: str) -> None:
        with self.lock:
            self.totals[name] = self.totals.get(name, 0) + value

    def seconds(self, name: str, value: float, **dimensions: str) -> None:
        self.count(name, value)


@dataclass
class Drain:
    """What one drain function holds: its own API client and budget."""

    api: client.CoreV1Api
    budget: DisruptionBudget
    transient_retries: int = 0

    @classmethod
    def connect(
        cls, server: KubeServer, metrics: SharedMetrics, *, total: str, per_zone: str, owner: str = "blue"
    ) -> Drain:
        api = core_api(server)
        budget = DisruptionBudget(
            store=ConfigMapBudgetStore(lambda: api, NAMESPACE),
            nodes=KubeNodeInventory(lambda: api),
            clock=WallClock(),
            metrics=metrics,
            limits=BudgetLimits(Quantity.parse(total), Quantity.parse(per_zone)),
            holder_ttl=timedelta(seconds=60),
            count_unavailable=True,
            owner=owner,
        )
        return cls(api, budget)

    def acquire(self, request: SlotRequest) -> SlotDecision:
        """Acquire, retrying a TransientError (conflicts that did not let up) as the step engine would."""
        while True:
            try:
                return self.budget.acquire(request)
            except TransientError:
                self.transient_retries += 1

    def close(self) -> None:
        self.api.api_client.close()
