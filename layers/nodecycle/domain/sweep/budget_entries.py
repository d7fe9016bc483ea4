"""The sweep of the disruption budget: this owner's entries whose node or instance is gone, or whose
lifecycle is over."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from nodecycle.domain.budget import Holder, Waiter
from nodecycle.domain.engine import Dispatcher
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.budget import SweepableBudget
from nodecycle.domain.ports.lifecycle import RecordStore
from nodecycle.domain.sweep.sweeper import Counts, lifecycle_over


class StaleBudgetEntries:
    """Budget entries of this owner whose node or instance is gone, or whose lifecycle is over."""

    def __init__(
        self,
        *,
        budget: SweepableBudget,
        records: RecordStore,
        node_names: Callable[[], set[str]],
        alive_instances: Callable[[Collection[str]], set[str]],
        waker: Dispatcher,
    ) -> None:
        self._budget = budget
        self._records = records
        self._node_names = node_names
        self._alive = alive_instances
        self._waker = waker

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime) -> Counts:
        open_ids = {record.id for record in open_records}
        facts: dict[str, set[str]] = {}

        def is_stale(entry: Holder | Waiter) -> bool:
            # Asked once per live entry of this owner: the node list and the instance check are made once.
            if "nodes" not in facts:
                facts["nodes"] = self._node_names()
            if entry.record_id not in open_ids and lifecycle_over(self._records, entry.record_id):
                return True
            if entry.node not in facts["nodes"]:
                return True
            if "alive" not in facts:
                facts["alive"] = self._alive([r.instance_id for r in open_records])
            return entry.instance_id not in facts["alive"]

        result = self._budget.sweep(is_stale=is_stale)
        for waiting in result.wake:
            self._waker.wake(waiting)
        return {"SweptHolders": len(result.holders), "SweptWaiters": len(result.waiters)}
