"""The COMPLETE step: settle the lifecycle action with Auto Scaling, exactly once in effect."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import Autoscaling
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

# record.extra key: the action was no longer active when this lifecycle came to complete it (completed by an
# earlier delivery, timed out, or never Auto Scaling's)
SETTLED_ELSEWHERE = "settled_elsewhere"


class CompleteAction:
    def __init__(self, autoscaling: Autoscaling, metrics: Metrics) -> None:
        self._autoscaling = autoscaling
        self._metrics = metrics

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        result = record.result or ActionResult.CONTINUE
        outcome = record.outcome or "completed"
        extra = record.extra
        if record.action_open:
            # Completing twice is harmless: "no active lifecycle action" means it is settled already.
            if self._autoscaling.complete(record.action, result):
                log.info("completed the lifecycle action with %s (%s)", result, outcome)
            else:
                log.info("the lifecycle action was already settled; nothing to complete")
                extra = {**extra, SETTLED_ELSEWHERE: True}
            self._metrics.count(
                "LifecycleActionsCompleted", result=result.value, transition=record.transition.short
            )
            self._metrics.seconds("LifecycleDuration", (now - record.started_at).total_seconds())
        return Outcome.next(completed_at=now, result=result, outcome=outcome, extra=extra)


@dataclass(frozen=True)
class SettleResults:
    """The result for an action that must be settled before its work could finish (its global timeout is
    near): a terminating instance goes either way, and CONTINUE lets the group's other hooks run; a launch
    follows the failure policy of the step it was waiting in. None: this function never settles a launch at
    that step (it does not run it)."""

    eip: ActionResult | None = None  # a launch still assigning its address
    readiness: ActionResult | None = None  # a launch waiting for its node to be Ready

    def __call__(self, record: LifecycleRecord) -> ActionResult:
        if record.transition is Transition.TERMINATING:
            return ActionResult.CONTINUE
        result = self.eip if record.step is Step.ASSIGN_EIP else self.readiness
        if result is None:
            raise RuntimeError(f"no failure result for a launch settled at step {record.step}")
        return result
