"""sweeper: on a schedule, repair what a crash left behind for this owner (see nodecycle.domain.sweeper)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from nodecycle.observability import logger, metrics, tracer
from nodecycle.wiring.common import common
from nodecycle.wiring.sweeper import sweeper


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    report = sweeper().sweep()
    for name, value in report.items():
        common().metrics.count(f"Sweep{name}", value)
    return report
