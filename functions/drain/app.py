"""drain: one step at a time of the lifecycles on the drain queue (terminate drains, launch readiness gates,
completions). Each SQS record is one work message; a record that fails alone is reported to SQS (partial
batch response), retried, and dead-lettered at last. The template's WakeFunction runs this same handler on
the wake queue (budget wake-ups): its engine is the drain worker's, so what it sends next goes to the drain
queue."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from nodecycle.entrypoints import BatchResponse, work_queue_handler
from nodecycle.wiring.drain import engine, invocation_time, redeliveries, shared

# (a record retried on purpose comes back sooner than the visibility timeout of the queue this function polls:
# the drain queue, or the wake queue for the wake function)
_work = work_queue_handler(engine, lambda: shared().metrics, redeliveries)


def handler(event: dict[str, Any], context: LambdaContext) -> BatchResponse:
    # The steps' calls end within the invocation's time (less the engine's reserve after them): a pass cut short
    # goes on at its next poll, where a function killed mid-call would commit nothing
    with invocation_time().running(context.get_remaining_time_in_millis() / 1000):
        return _work(event, context)
