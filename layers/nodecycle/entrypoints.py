"""Lambda glue shared by the function handlers: work-message handling.

Handlers stay thin: parse the event, call the domain through these helpers, map the outcome. Log keys of
one record (instance id, lifecycle token as the correlation id) come from the powertools Logger's
``append_context_keys``, which removes them when the record is done, so the next record starts clean; keys
whose value is None are left out of the log lines.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from nodecycle.domain.engine import Handled, StepEngine
from nodecycle.domain.model import parse_record_id
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.domain.ports.runtime import Metrics
from nodecycle.observability import logger, metrics, tracer

WorkHandler = Callable[[dict[str, Any], LambdaContext], PartialItemFailureResponse]


def run_work_record(engine: StepEngine, metrics: Metrics, record: SQSRecord, context: Any) -> Handled | None:
    """One SQS record of a work queue: one step (or a few inline) of one lifecycle.

    A body that is not a work message can never succeed: it is logged and dropped, not retried. Anything
    raised from the engine fails this record only, so SQS redelivers it and, in the end, dead-letters it.
    """
    try:
        message = WorkMessage.model_validate_json(record.body)
    except ValidationError as error:
        logger.error(
            "dropped a work message that is not valid: %s",
            error.errors()[0]["msg"],
            extra={"body": record.body[:500], "message_id": record.message_id},
        )
        metrics.count("WorkMessagesRejected")
        return None
    try:
        instance_id, _, token = parse_record_id(message.record_id)
    except ValueError:
        instance_id, token = None, None  # the engine finds no such record and drops the message
    with logger.append_context_keys(
        record_id=message.record_id, instance_id=instance_id, lifecycle_token=token, correlation_id=token
    ):
        handled = engine.handle(message, time_left=lambda: context.get_remaining_time_in_millis() / 1000)
        logger.debug("work message handled: %s", handled, extra={"seq": message.seq, "step": message.step})
        return handled


def work_queue_handler(engine: Callable[[], StepEngine], sink: Callable[[], Metrics]) -> WorkHandler:
    """The Lambda handler of a work queue: each SQS record is one work message, run by ``engine``; a record
    that raises fails alone (partial batch response), so SQS retries it, then dead-letters it."""
    processor = BatchProcessor(event_type=EventType.SQS)

    def work(record: SQSRecord, lambda_context: LambdaContext) -> str:
        handled = run_work_record(engine(), sink(), record, lambda_context)
        return handled.value if handled is not None else "rejected"

    @logger.inject_lambda_context(clear_state=True)
    @tracer.capture_lambda_handler
    @metrics.log_metrics
    def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
        return process_partial_response(
            event=event, record_handler=work, processor=processor, context=context
        )

    return handler
