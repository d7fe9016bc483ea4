"""intake: lifecycle actions from EventBridge (direct) and from the intake queue (SQS, batch).

Parse and validate, drop test notifications and what is not valid (one log line and a metric, never a
retry: the same bytes would fail the same way), then hand the action to the domain, which ignores
unmanaged groups, de-duplicates, writes the record and sends the first unit of work. Errors from AWS
propagate: EventBridge's asynchronous invocation retries and then dead-letters; on the queue, the record
alone fails (partial batch response) and is retried, then dead-lettered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from nodecycle.contracts.lifecycle_events import (
    InvalidLifecycleEvent,
    TestNotification,
    from_eventbridge,
    from_sqs_body,
)
from nodecycle.domain.model import LifecycleEvent
from nodecycle.entrypoints import BatchResponse, SqsRecord, correlated, partial_batch
from nodecycle.observability import logger, metrics, tracer
from nodecycle.wiring.intake import intake, shared


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> BatchResponse | None:
    if "Records" in event:
        return partial_batch(event, _queue_record)
    accept(lambda: from_eventbridge(event))
    return None


def _queue_record(record: SqsRecord) -> str:
    with correlated(message_id=record.get("messageId")):
        return accept(lambda: from_sqs_body(record["body"]))


def accept(parse: Callable[[], LifecycleEvent | TestNotification]) -> str:
    try:
        event = parse()
    except InvalidLifecycleEvent as error:
        logger.error("rejected a lifecycle event: %s", error, extra={"reason": error.reason})
        shared().metrics.count("LifecycleEventsRejected", reason=error.reason)
        return "rejected"
    if isinstance(event, TestNotification):
        logger.info("test notification for group %s acknowledged", event.AutoScalingGroupName)
        return "test-notification"
    with correlated(
        instance_id=event.instance_id,
        lifecycle_token=event.token,
        group=event.group,
        transition=event.transition.short,
        delivery=event.delivery,
    ):
        return intake().accept(event).value
