"""Lambda glue shared by the function handlers: correlation ids and work-message handling.

Handlers stay thin: parse the event, call the domain through these helpers, map the outcome.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import ValidationError

from nodecycle.domain.engine import Handled, StepEngine
from nodecycle.domain.ports import Metrics, WorkMessage
from nodecycle.observability import logger


@contextmanager
def correlated(**keys: str | None) -> Iterator[None]:
    """Log keys for one record of a batch, removed afterwards so the next record starts clean."""
    present = {key: value for key, value in keys.items() if value}
    logger.append_keys(**present)
    if present.get("lifecycle_token"):
        logger.set_correlation_id(present["lifecycle_token"])
    try:
        yield
    finally:
        logger.remove_keys(list(present))
        logger.set_correlation_id(None)


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
    instance_id = message.record_id.split("/", 1)[0]
    with correlated(
        record_id=message.record_id,
        instance_id=instance_id,
        lifecycle_token=message.record_id.rsplit("/", 1)[-1],
    ):
        handled = engine.handle(message, time_left=lambda: context.get_remaining_time_in_millis() / 1000)
        logger.debug("work message handled: %s", handled, extra={"seq": message.seq, "step": message.step})
        return handled
