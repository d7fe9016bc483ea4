"""drain: one step at a time of the lifecycles on the drain queue (terminate drains, launch readiness gates,
completions). Each SQS record is one work message; a record that fails alone is reported to SQS (partial
batch response), retried, and dead-lettered at last."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from nodecycle.entrypoints import run_work_record
from nodecycle.observability import logger, metrics, tracer
from nodecycle.wiring.common import common
from nodecycle.wiring.drain import engine

processor = BatchProcessor(event_type=EventType.SQS)


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    return process_partial_response(event=event, record_handler=_work, processor=processor, context=context)


def _work(record: SQSRecord, lambda_context: LambdaContext) -> str:
    handled = run_work_record(engine(), common().metrics, record, lambda_context)
    return handled.value if handled is not None else "rejected"
