"""sweeper: on a schedule, repair what a crash left behind for this owner (see nodecycle.domain.sweeper)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from nodecycle.observability import logger, metrics, tracer
from nodecycle.wiring.common import invocation_time
from nodecycle.wiring.sweeper import sweeper


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    # Each part counts its own metrics (SweptHolders, SweptEips, LifecyclesResumed...); the report is the
    # invocation's result and its log line. The parts start work only with time left for it, and the calls of
    # the work started end within the invocation's (a hung API server or AWS endpoint would otherwise hold one
    # call past the timeout: killed mid-call, the sweep would neither log nor count what it left undone).
    def time_left() -> float:
        return context.get_remaining_time_in_millis() / 1000

    with invocation_time().running(time_left()):
        return sweeper().sweep(time_left=time_left, scheduled_at=scheduled_at(event))


def scheduled_at(event: dict[str, Any]) -> datetime | None:
    """When the schedule fired this sweep: EventBridge's ``time``, which a late delivery (the sweeper throttled, its
    event retried) keeps. None for an invocation without one (by hand, with another payload)."""
    stamp = event.get("time")
    if not isinstance(stamp, str):
        return None
    try:
        at = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # (EventBridge's times are UTC)
