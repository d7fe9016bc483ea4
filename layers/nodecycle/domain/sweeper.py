"""The sweeper: what repairs a crash that redelivery alone cannot.

Every few minutes, for this owner only:

- lifecycles whose next step is long overdue (their message was lost) are resumed; one whose action is
  near its global timeout is completed right here, so invariant 2 holds even when the work queue is stuck;
- budget holders and waiters whose node or instance is gone, or whose lifecycle is over, are removed;
- nodes left with this owner's annotations by a lifecycle that is over get them cleared;
- (through the EIP part) addresses left unassociated past the sweep grace are released.

Each part runs even when another fails; a failure is logged with its cause and re-raised at the end, so
the invocation counts as failed.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from nodecycle.domain.budget import Holder, SweepResult, Waiter
from nodecycle.domain.cluster import Claim, NodeInfo
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.drain.steps import WaiterWaker
from nodecycle.domain.engine import Dispatcher, advance
from nodecycle.domain.model import LifecycleRecord, Step, Transition, record_id
from nodecycle.domain.ports import Clock, Metrics, RecordStore
from nodecycle.settings import ActionResult

log = logging.getLogger(__name__)

Counts = dict[str, int]
MAX_RESUMES = 5  # a lifecycle resumed this often is failing for a reason a resend will not fix


class SweepPart(Protocol):
    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime) -> Counts: ...


class SweepFailed(Exception):
    """At least one part of a sweep failed; the others ran."""


class Sweeper:
    def __init__(
        self, *, owner: str, records: RecordStore, clock: Clock, parts: Mapping[str, SweepPart]
    ) -> None:
        self._owner = owner
        self._records = records
        self._clock = clock
        self._parts = parts

    def sweep(self) -> Counts:
        now = self._clock.now()
        open_records = list(self._records.open_records(self._owner))
        report: Counts = {"OpenLifecycles": len(open_records)}
        failed: list[str] = []
        for name, part in self._parts.items():
            try:
                report |= part(open_records, now)
            except Exception:  # isolate the parts: log it whole here, fail the sweep at the end
                log.exception("sweep part %s failed", name)
                failed.append(name)
        log.info("sweep done", extra={"sweep": report})
        if failed:
            raise SweepFailed(f"sweep parts failed: {', '.join(failed)} (the others ran)")
        return report


class LifecycleRepair:
    """Resume lifecycles whose message was lost; settle those whose action is near its global timeout."""

    def __init__(
        self,
        *,
        records: RecordStore,
        dispatcher: Dispatcher,
        completion: CompleteAction,
        metrics: Metrics,
        resume_grace: timedelta,
        margin: timedelta,
        failure_result: Callable[[LifecycleRecord], ActionResult],
    ) -> None:
        self._records = records
        self._dispatcher = dispatcher
        self._completion = completion
        self._metrics = metrics
        self._grace = resume_grace
        self._margin = margin
        self._failure_result = failure_result

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime) -> Counts:
        counts = dict.fromkeys(
            ("LifecyclesResumed", "LifecyclesSettled", "LifecyclesStuck", "RepairsRaced"), 0
        )
        counts["RepairsFailed"] = 0
        for record in open_records:
            if not record.overdue(now, self._grace):
                continue
            try:
                counts[self._repair(record, now)] += 1
            except Exception:  # one lifecycle's failure must not stop the repair of the others
                log.exception("could not repair lifecycle %s", record.id)
                counts["RepairsFailed"] += 1
        self._metrics.count("LifecyclesStuck", counts["LifecyclesStuck"])
        if counts["RepairsFailed"]:
            raise SweepFailed(f"{counts['RepairsFailed']} lifecycles could not be repaired (the others were)")
        return counts

    def _repair(self, record: LifecycleRecord, now: datetime) -> str:
        """What became of one overdue lifecycle: the name of its count."""
        if record.action_open and now >= record.global_deadline - 2 * self._margin:
            return "LifecyclesSettled" if self._settle(record, now) else "RepairsRaced"
        if record.resumes >= MAX_RESUMES:
            log.error("lifecycle %s is stuck at %s after %d resumes", record.id, record.step, record.resumes)
            return "LifecyclesStuck"
        return "LifecyclesResumed" if self._dispatcher.resume(record) else "RepairsRaced"

    def _settle(self, record: LifecycleRecord, now: datetime) -> bool:
        log.error(
            "lifecycle %s at %s is overdue near its global timeout: completing it now", record.id, record.step
        )
        self._metrics.count("GlobalTimeoutsNear")
        settling = record.model_copy(
            update={
                "step": Step.COMPLETE,
                "result": self._failure_result(record),
                "outcome": "settled-by-sweeper",
            }
        )
        settled = advance(settling, self._completion(settling, now), now)
        if not self._records.commit(settled, expected_seq=record.seq):
            return False
        if not settled.finished:
            self._dispatcher.send(settled, now)  # what comes after completion: the cleanup
        return True


class SweepableBudget(Protocol):
    def sweep(self, *, is_stale: Callable[[Holder | Waiter], bool]) -> SweepResult: ...


class StaleBudgetEntries:
    """Budget entries of this owner whose node or instance is gone, or whose lifecycle is over."""

    def __init__(
        self,
        *,
        budget: SweepableBudget,
        records: RecordStore,
        node_names: Callable[[], set[str]],
        alive_instances: Callable[[Collection[str]], set[str]],
        waker: WaiterWaker,
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
            if entry.record_id not in open_ids and _over(self._records, entry.record_id):
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


class OwnedNodes(Protocol):
    def nodes_owned_by(self, owner: str) -> list[NodeInfo]: ...

    def release_node(self, node: NodeInfo) -> Claim: ...


class LeftoverAnnotations:
    """Nodes still annotated by this owner for a lifecycle that is over: clear both annotations at once."""

    def __init__(self, *, owner: str, cluster: OwnedNodes, records: RecordStore, metrics: Metrics) -> None:
        self._owner = owner
        self._cluster = cluster
        self._records = records
        self._metrics = metrics

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime) -> Counts:
        open_ids = {record.id for record in open_records}
        cleared = 0
        for node in self._cluster.nodes_owned_by(self._owner):
            lifecycle = _lifecycle_of(node)
            if lifecycle is not None and (lifecycle in open_ids or not _over(self._records, lifecycle)):
                continue
            if self._cluster.release_node(node) is Claim.CLAIMED:
                log.info(
                    "cleared leftover annotations of node %s (lifecycle %s is over)", node.name, lifecycle
                )
                cleared += 1
        self._metrics.count("AnnotationsCleared", cleared)
        return {"AnnotationsCleared": cleared}


def _over(records: RecordStore, record_id: str) -> bool:
    """Whether a lifecycle missing from the sweep's list of open ones is really over. The list is a snapshot
    from an index that lags: a lifecycle that started since, or that the index has not caught up with, is
    read again, consistently, before anything of it is removed."""
    record = records.get(record_id)
    return record is None or record.finished


def _lifecycle_of(node: NodeInfo) -> str | None:
    """The lifecycle record id an in-progress annotation names (None if unreadable)."""
    try:
        data = json.loads(node.in_progress or "")
        transition = Transition.TERMINATING if data["transition"] == "terminate" else Transition.LAUNCHING
        return record_id(data["instance"], transition, data["token"])
    except (ValueError, KeyError, TypeError):
        return None
