"""sweeper: on a schedule, repair what a crash left behind for this owner (see nodecycle.domain.sweeper)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from nodecycle.observability import logger, metrics, tracer
from nodecycle.wiring.sweeper import sweeper


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    # Each part counts its own metrics (SweptHolders, SweptEips, LifecyclesResumed...); the report is the
    # invocation's result and its log line. The parts start work only with time left for it.
    return sweeper().sweep(time_left=lambda: context.get_remaining_time_in_millis() / 1000)
