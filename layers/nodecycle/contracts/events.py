"""Every event intake reads, whichever way it came: lifecycle actions (:mod:`.lifecycle_events`) and
disruptions without a hook (:mod:`.disruption_events`).

By the intake queue also comes what its dead-letter queue held, sent back (the runbook's redrive): a hook
notification and an event EventBridge could not deliver as they were, and the record Lambda's on-failure
destination wrote for an event whose invocations all failed, the event in its ``requestPayload``. That one
is taken in as its event, trusted as little as anything else on the queue (anyone allowed to send to it can
write one).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from nodecycle.contracts import disruption_events, lifecycle_events
from nodecycle.contracts.lifecycle_events import InvalidLifecycleEvent, TestNotification
from nodecycle.domain.model import DisruptionEvent, LifecycleEvent

log = logging.getLogger(__name__)

Received = LifecycleEvent | DisruptionEvent
REDRIVEN = "sqs-redriven"  # the delivery of an event its on-failure record brought back by the queue


def from_eventbridge(event: Mapping[str, Any], delivery: str = "eventbridge") -> list[Received]:
    if disruption_events.is_disruption_event(event):
        return list(disruption_events.from_eventbridge(event, delivery))
    return [lifecycle_events.from_eventbridge(event, delivery)]


def from_sqs_body(body: str) -> list[Received] | TestNotification:
    """A message of the intake queue: a hook notification, a test notification, or an EventBridge event
    (lifecycle action or disruption) that an SQS target delivered, or that an on-failure record redriven from
    the dead-letter queue carries."""
    data = lifecycle_events.load_json(body)
    delivery = "sqs-eventbridge"
    if is_on_failure_record(data):
        data, delivery = redriven_event(data), REDRIVEN
    if isinstance(data, dict) and disruption_events.is_disruption_event(data):
        return list(disruption_events.from_eventbridge(data, delivery=delivery))
    parsed = lifecycle_events.from_sqs_data(data, eventbridge_delivery=delivery)
    return parsed if isinstance(parsed, TestNotification) else [parsed]


def is_on_failure_record(data: Any) -> bool:
    """Whether a message body read as JSON is a record Lambda's on-failure destination wrote (its
    ``requestContext`` and ``responseContext``: neither an EventBridge event nor a hook notification has
    them)."""
    return (
        isinstance(data, dict) and isinstance(data.get("requestContext"), dict) and "responseContext" in data
    )


def redriven_event(record: Mapping[str, Any]) -> dict[str, Any]:
    """The EventBridge event an on-failure record carries (Lambda invokes intake asynchronously for
    EventBridge alone); :class:`InvalidLifecycleEvent` naming the payload for a record that carries none."""
    if "requestPayload" not in record:
        raise InvalidLifecycleEvent("missing-field", "requestPayload is missing from an on-failure record")
    payload = record["requestPayload"]
    if not isinstance(payload, dict):
        raise InvalidLifecycleEvent(
            "unknown-shape", f"requestPayload is a JSON {type(payload).__name__}, not an EventBridge event"
        )
    if "source" not in payload and "detail-type" not in payload:
        raise InvalidLifecycleEvent(
            "unknown-shape",
            f"requestPayload is not an EventBridge event (keys: {sorted(payload)[:8]})",
        )
    context = record["requestContext"]
    log.info(
        "an on-failure record redriven: its event %s (%s after %s invocations)",
        payload.get("id"),
        context.get("condition"),
        context.get("approximateInvokeCount"),
    )
    return payload


def names_many(body: str) -> bool:
    """Whether a message of the intake queue is an AWS Health event: the one event that names many instances
    (each of the others tells of one). A body that is not JSON is not: its record is rejected when taken in."""
    try:
        data = lifecycle_events.load_json(body)
    except InvalidLifecycleEvent:
        return False
    if is_on_failure_record(data):  # (redriven: its event)
        data = data.get("requestPayload")
    return isinstance(data, dict) and data.get("source") == disruption_events.HEALTH_SOURCE
