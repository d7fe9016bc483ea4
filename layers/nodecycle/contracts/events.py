"""Every event intake reads, whichever way it came: lifecycle actions (:mod:`.lifecycle_events`) and
disruptions without a hook (:mod:`.disruption_events`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodecycle.contracts import disruption_events, lifecycle_events
from nodecycle.contracts.lifecycle_events import InvalidLifecycleEvent, TestNotification
from nodecycle.domain.model import DisruptionEvent, LifecycleEvent

Received = LifecycleEvent | DisruptionEvent


def from_eventbridge(event: Mapping[str, Any], delivery: str = "eventbridge") -> list[Received]:
    if disruption_events.is_disruption_event(event):
        return list(disruption_events.from_eventbridge(event, delivery))
    return [lifecycle_events.from_eventbridge(event, delivery)]


def from_sqs_body(body: str) -> list[Received] | TestNotification:
    """A message of the intake queue: a hook notification, a test notification, or an EventBridge event
    (lifecycle action or disruption) that an SQS target delivered."""
    data = lifecycle_events.load_json(body)
    if isinstance(data, dict) and disruption_events.is_disruption_event(data):
        return list(disruption_events.from_eventbridge(data, delivery="sqs-eventbridge"))
    parsed = lifecycle_events.from_sqs_data(data)
    return parsed if isinstance(parsed, TestNotification) else [parsed]


def names_many(body: str) -> bool:
    """Whether a message of the intake queue is an AWS Health event: the one event that names many instances
    (each of the others tells of one). A body that is not JSON is not: its record is rejected when taken in."""
    try:
        data = lifecycle_events.load_json(body)
    except InvalidLifecycleEvent:
        return False
    return isinstance(data, dict) and data.get("source") == disruption_events.HEALTH_SOURCE
