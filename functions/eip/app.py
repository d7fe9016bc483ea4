"""eip: Elastic IP work from the EIP queue (SQS, in batches): assign at launch, take back at terminate.

Each record is one work message of one lifecycle. The step engine runs the step (or a few inline), commits
the record and sends the next message, to this queue or the drain queue. A record whose body is not a work
message is logged and dropped; a record that raises fails alone (partial batch response), and SQS retries
it, then dead-letters it. This function never imports the Kubernetes client (cold start).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from nodecycle.entrypoints import BatchResponse, work_queue_handler
from nodecycle.wiring.eip import engine, invocation_time, redeliveries, shared

# (a record retried on purpose comes back sooner than the EIP queue's visibility timeout)
_work = work_queue_handler(engine, lambda: shared().metrics, redeliveries)


def handler(event: dict[str, Any], context: LambdaContext) -> BatchResponse:
    # The steps' AWS calls end within the invocation's time, less the engine's reserve after them, as the drain
    # function's: a step cut short is retried, where a function killed mid-call would commit nothing
    with invocation_time().running(context.get_remaining_time_in_millis() / 1000):
        return _work(event, context)
