"""eip: Elastic IP work from the EIP queue (SQS, in batches): assign at launch, take back at terminate.

Each record is one work message of one lifecycle. The step engine runs the step (or a few inline), commits
the record and sends the next message, to this queue or the drain queue. A record whose body is not a work
message is logged and dropped; a record that raises fails alone (partial batch response), and SQS retries
it, then dead-letters it. This function never imports the Kubernetes client (cold start).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from nodecycle.entrypoints import run_work_record
from nodecycle.observability import logger, metrics, tracer
from nodecycle.wiring.common import common
from nodecycle.wiring.eip import engine

processor = BatchProcessor(event_type=EventType.SQS)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=_work, processor=processor, context=context)


def _work(record: SQSRecord, lambda_context: LambdaContext) -> str:
    handled = run_work_record(engine(), common().metrics, record, lambda_context)
    return handled.value if handled is not None else "rejected"
