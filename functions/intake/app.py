"""intake: lifecycle actions and disruptions (Spot interruptions, rebalance recommendations, scheduled
maintenance, instances stopped or terminated outside the hooks) from EventBridge (direct) and from the
intake queue (SQS, batch).

Parse and validate, drop test notifications and what is not valid (one log line and a metric, never a
retry: the same bytes would fail the same way), then hand each action or disruption to the domain, which
ignores what is not this stack's, de-duplicates, writes the record and sends the first unit of work. Errors
from AWS propagate: on the queue, the record alone fails (partial batch response) and is retried, then
dead-lettered; a lifecycle action's event from EventBridge retried on purpose is handed to the queue, delayed
(``wiring/intake_requeue.py``), and anything else fails the asynchronous invocation, which Lambda retries and then
dead-letters. An instance is started only
with time left to finish it (domain/intake_budget.py): an event whose instances remain when the time is nearly
out fails the same way, and its retry continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from nodecycle.contracts.disruption_events import NotADisruption
from nodecycle.contracts.events import Home, Received, from_eventbridge, from_sqs_body, names_many
from nodecycle.contracts.lifecycle_events import TEST_NOTIFICATION, InvalidLifecycleEvent, TestNotification
from nodecycle.domain.model import DisruptionEvent
from nodecycle.domain.ports.instances import InstanceFacts
from nodecycle.entrypoints import BatchResponse, SqsRecord, partial_batch
from nodecycle.observability import logger, metrics, tracer
from nodecycle.wiring.intake import budget, intake, invocation_time, redeliveries, shared
from nodecycle.wiring.intake_requeue import handed_to_the_queue


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> BatchResponse | None:
    def time_left() -> float:
        return context.get_remaining_time_in_millis() / 1000

    # (where the stack runs: a message that says it is from another account or region is refused)
    home = Home.of_function(context.invoked_function_arn)
    # (every AWS call ends within the invocation's time: one against an endpoint that never answers would
    # otherwise outlast the function, and the batch's records taken in before it would come back with it)
    with invocation_time().running(time_left()):
        if "Records" in event:
            return partial_batch(
                _health_events_last(event),
                lambda record: _queue_record(record, home, time_left),
                redeliveries(),
            )
        try:
            accept(lambda: from_eventbridge(event, home=home), time_left)
        except Exception as error:
            if not handed_to_the_queue(event, error):
                raise
        return None


def _health_events_last(event: dict[str, Any]) -> dict[str, Any]:
    """The batch with its AWS Health events after its other records. Those tell of one instance each, a few
    AWS calls; a Health event names many, and takes in what the invocation's time allows (the rest at its
    retry). Taken first, it would leave the others too little time: they would go back to the queue for its
    visibility timeout (a hook's action three minutes later, its heartbeat timeout running), each receive
    counted towards the dead-letter queue, and be delivered beside it again."""
    records = event.get("Records") or []
    return {**event, "Records": sorted(records, key=lambda record: names_many(record.get("body", "")))}


def _queue_record(record: SqsRecord, home: Home, time_left: Callable[[], float]) -> str:
    with logger.append_context_keys(message_id=record.get("messageId")):
        return accept(lambda: from_sqs_body(record["body"], home), time_left)


def accept(parse: Callable[[], list[Received] | TestNotification], time_left: Callable[[], float]) -> str:
    try:
        events = parse()
    except InvalidLifecycleEvent as error:
        logger.error("rejected a lifecycle event: %s", error, extra={"reason": error.reason})
        shared().metrics.count("LifecycleEventsRejected", reason=error.reason)
        return "rejected"
    except NotADisruption as error:
        logger.info("acknowledged an event that tells of no disruption: %s", error)
        return "not-a-disruption"
    if isinstance(events, TestNotification):
        told = "test notification" if events.Event == TEST_NOTIFICATION else events.Event
        logger.info("%s for group %s acknowledged", told, events.AutoScalingGroupName)
        return "test-notification"
    disruptions = [event for event in events if isinstance(event, DisruptionEvent)]
    # (read when the first instance is started: a record sent back for want of time has asked EC2 nothing)
    looked_up = cache(lambda: intake().look_up(disruptions))
    return ",".join(budget().take_in(events, lambda event: _accept_one(event, looked_up()), time_left))


def _accept_one(event: Received, looked_up: Mapping[str, InstanceFacts] | None) -> str:
    if isinstance(event, DisruptionEvent):
        with logger.append_context_keys(
            instance_id=event.instance_id,
            event_id=event.event_id,
            correlation_id=event.event_id,
            transition=event.cause.short,
            delivery=event.delivery,
        ):
            return intake().accept_disruption(event, looked_up).value
    with logger.append_context_keys(
        instance_id=event.instance_id,
        lifecycle_token=event.token,
        correlation_id=event.token,
        group=event.group,
        transition=event.transition.short,
        delivery=event.delivery,
    ):
        return intake().accept(event).value
