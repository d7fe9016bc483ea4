"""The sweep of lifecycles: resume those whose message was lost; settle those near their global timeout."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import Dispatcher, advance
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import RecordStore
from nodecycle.domain.ports.runtime import Metrics
from nodecycle.domain.sweep.sweeper import Counts, SweepFailed

log = logging.getLogger(__name__)

MAX_RESUMES = 5  # a lifecycle resumed this often is failing for a reason a resend will not fix


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
        # An action whose completion was already decided (the step is COMPLETE) keeps its result and why;
        # any other is settled with the failure result of the step it was waiting in.
        decided = record.step is Step.COMPLETE and record.result is not None
        settling = record.model_copy(
            update={
                "step": Step.COMPLETE,
                "result": record.result if decided else self._failure_result(record),
                "outcome": record.outcome if decided else "settled-by-sweeper",
            }
        )
        settled = advance(settling, self._completion(settling, now), now)
        if not self._records.commit(settled, expected_seq=record.seq):
            return False
        if not settled.finished:
            self._dispatcher.send(settled, now)  # what comes after completion: the cleanup
        return True
