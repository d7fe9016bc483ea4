"""The COMPLETE step: settle the lifecycle action with Auto Scaling, exactly once in effect."""

from __future__ import annotations

import logging
from datetime import datetime

from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports import Autoscaling, Metrics
from nodecycle.settings import ActionResult

log = logging.getLogger(__name__)


class CompleteAction:
    def __init__(self, autoscaling: Autoscaling, metrics: Metrics) -> None:
        self._autoscaling = autoscaling
        self._metrics = metrics

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        result = record.result or ActionResult.CONTINUE
        outcome = record.outcome or "completed"
        if record.action_open:
            # Completing twice is harmless: "no active lifecycle action" means it is settled already.
            if self._autoscaling.complete(record.action, result):
                log.info("completed the lifecycle action with %s (%s)", result, outcome)
            else:
                log.info("the lifecycle action was already settled; nothing to complete")
            self._metrics.count(
                "LifecycleActionsCompleted", result=result.value, transition=record.transition.short
            )
            self._metrics.seconds("LifecycleDuration", (now - record.started_at).total_seconds())
        return Outcome.next(completed_at=now, result=result, outcome=outcome)
