"""Every event intake reads, whichever way it came: lifecycle actions (:mod:`.lifecycle_events`) and
disruptions without a hook (:mod:`.disruption_events`).

By the intake queue also comes what its dead-letter queue held, sent back (the runbook's redrive): a hook
notification and an event EventBridge could not deliver as they were, and the record Lambda's on-failure
destination wrote for an event whose invocations all failed, the event in its ``requestPayload``. That one
is taken in as its event, trusted as little as anything else on the queue (anyone allowed to send to it can
write one).

And what an SNS topic delivered to the queue without raw message delivery (a hook notifying a topic the queue is
subscribed to): the notification's envelope, the message in it as a string. That one is taken in as its message,
trusted as little (anyone allowed to send to the queue can write an envelope too).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodecycle.contracts import disruption_events, lifecycle_events
from nodecycle.contracts.disruption_events import NotADisruption
from nodecycle.contracts.lifecycle_events import InvalidLifecycleEvent, TestNotification, keys_of
from nodecycle.domain.model import DisruptionEvent, LifecycleEvent

log = logging.getLogger(__name__)

Received = LifecycleEvent | DisruptionEvent
REDRIVEN = "sqs-redriven"  # the delivery of an event its on-failure record brought back by the queue


@dataclass(frozen=True)
class Home:
    """The account and region the stack runs in: the only ones whose groups and instances it can act on."""

    account: str
    region: str

    @classmethod
    def of_function(cls, arn: str) -> Home:
        """Where the function of ``arn`` (``arn:aws:lambda:<region>:<account>:function:<name>``, its context's
        ``invoked_function_arn``) runs."""
        parts = arn.split(":")
        if len(parts) < 7 or parts[2] != "lambda":
            raise ValueError(f"{arn!r} is not a Lambda function's ARN")
        return cls(account=parts[4], region=parts[3])

    def check(self, data: Mapping[str, Any]) -> None:
        """:class:`InvalidLifecycleEvent` for a message that says it is from another account or region: an
        EventBridge event's ``account`` and ``region``, a hook notification's ``AccountId`` (it names no region).
        A group of the same name elsewhere is not this stack's, and an action of it is not one this account's
        Auto Scaling holds: taken in, it would cost a record, a step and an unknown action's alarm. (A field
        missing or of another type is left to the shape's validation, which names it.) And :class:`NotADisruption`
        for an AWS Health event about another account or region (``_health_of_here``)."""
        account = data.get("account", data.get("AccountId"))
        if isinstance(account, str) and account != self.account:
            raise InvalidLifecycleEvent(
                "wrong-account", f"account {account[:64]!r} is not this stack's ({self.account})"
            )
        region = data.get("region")
        if isinstance(region, str) and region != self.region:
            raise InvalidLifecycleEvent(
                "wrong-region", f"region {region[:64]!r} is not this stack's ({self.region})"
            )
        if data.get("source") == disruption_events.HEALTH_SOURCE:
            self._health_of_here(data.get("detail"))

    def _health_of_here(self, detail: object) -> None:
        """:class:`NotADisruption` for an AWS Health event delivered here about another account or region. Its
        ``account`` and ``region`` say where it was delivered, not what it is about (Health's EventBridge schema):
        the management or delegated administrator account of an organization receives its members' events
        (``detail.affectedAccount``), and the partition's backup region a copy of other regions' events
        (``detail.eventRegion``, ``backupEvent``). AWS's own, of instances this stack cannot have: acknowledged.
        Refused, each would page (RejectedEventsAlarm) as a forged message, its instances unknown to EC2 here."""
        if not isinstance(detail, Mapping):
            return  # (left to the shape's validation, which names it)
        account, region = detail.get("affectedAccount"), detail.get("eventRegion")
        if isinstance(account, str) and account != self.account:
            raise NotADisruption(
                f"an AWS Health event of account {account[:64]!r}, not this stack's ({self.account})"
            )
        if isinstance(region, str) and region != self.region:
            raise NotADisruption(
                f"an AWS Health event of region {region[:64]!r}, not this stack's ({self.region})"
            )


def from_eventbridge(
    event: Mapping[str, Any], delivery: str = "eventbridge", home: Home | None = None
) -> list[Received]:
    if home is not None:
        home.check(event)
    if disruption_events.is_disruption_event(event):
        return list(disruption_events.from_eventbridge(event, delivery))
    return [lifecycle_events.from_eventbridge(event, delivery)]


def from_sqs_body(body: str, home: Home | None = None) -> list[Received] | TestNotification:
    """A message of the intake queue: a hook notification, a test notification, or an EventBridge event
    (lifecycle action or disruption) that an SQS target delivered, or that an on-failure record redriven from
    the dead-letter queue carries. ``home``: where the stack runs (a message from elsewhere is refused)."""
    data = lifecycle_events.load_json(body)
    delivery = "sqs-eventbridge"
    if is_sns_notification(data):
        data = sns_message(data)
    else:
        _no_other_sns_message(data)
    if is_on_failure_record(data):
        data, delivery = redriven_event(data), REDRIVEN
    if home is not None and isinstance(data, dict):
        home.check(data)
    if isinstance(data, dict) and disruption_events.is_disruption_event(data):
        return list(disruption_events.from_eventbridge(data, delivery=delivery))
    parsed = lifecycle_events.from_sqs_data(data, eventbridge_delivery=delivery)
    return parsed if isinstance(parsed, TestNotification) else [parsed]


def is_sns_notification(data: Any) -> bool:
    """Whether a message body read as JSON is an SNS notification's envelope (a subscription without raw message
    delivery): ``Type`` Notification, its ``TopicArn`` and its ``Message``. Neither an EventBridge event nor a
    hook notification has those."""
    return (
        isinstance(data, dict)
        and data.get("Type") == "Notification"
        and "TopicArn" in data
        and "Message" in data
    )


def sns_message(envelope: Mapping[str, Any]) -> Any:
    """The message an SNS notification's envelope carries, read as JSON (once: an envelope in it is not opened);
    :class:`InvalidLifecycleEvent` for one that is not a JSON string."""
    message = envelope["Message"]
    if not isinstance(message, str):
        raise InvalidLifecycleEvent(
            "invalid-field",
            f"Message of an SNS notification is a JSON {type(message).__name__}, not a string",
        )
    data = lifecycle_events.load_json(message)
    log.info("an SNS notification of topic %r: its message taken in", str(envelope.get("TopicArn"))[:256])
    return data


def _no_other_sns_message(data: Any) -> None:
    """:class:`InvalidLifecycleEvent` saying what an SNS message that is no notification is: the confirmation of a
    subscription of the queue to a topic (or of its end), an operator's to confirm by its SubscribeURL, not a shape
    to tell by its keys."""
    if not isinstance(data, dict) or "TopicArn" not in data:
        return
    kind = data.get("Type")
    if kind in ("SubscriptionConfirmation", "UnsubscribeConfirmation"):
        raise InvalidLifecycleEvent(
            "unknown-shape",
            f"an SNS {kind} of topic {str(data['TopicArn'])[:256]!r}, no notification: a subscription of this "
            "queue to the topic is confirmed by its SubscribeURL",
        )


def is_on_failure_record(data: Any) -> bool:
    """Whether a message body read as JSON is a record Lambda's on-failure destination wrote: its
    ``requestContext`` with a ``responseContext`` (an invocation that ran and failed) or with its
    ``requestPayload`` alone (an event Lambda never ran: the function at reserved concurrency 0,
    ``ZeroReservedConcurrency``). Neither an EventBridge event nor a hook notification has a ``requestContext``."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("requestContext"), dict)
        and ("responseContext" in data or "requestPayload" in data)
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
            f"requestPayload is not an EventBridge event (keys: {keys_of(payload)})",
        )
    context = record["requestContext"]
    log.info(
        "an on-failure record redriven: its event %s (%s after %s invocations)",
        # (cut as an EventBridge id, a condition and a count can be long: the record's writer may be anyone's)
        str(payload.get("id"))[:128],
        str(context.get("condition"))[:64],
        str(context.get("approximateInvokeCount"))[:16],
    )
    return payload


def names_many(body: str) -> bool:
    """Whether a message of the intake queue is an AWS Health event: the one event that names many instances
    (each of the others tells of one). A body that is not JSON is not: its record is rejected when taken in."""
    try:
        data = lifecycle_events.load_json(body)
    except InvalidLifecycleEvent:
        return False
    if is_sns_notification(data) and isinstance(data.get("Message"), str):  # (by SNS: its message)
        try:
            data = lifecycle_events.load_json(data["Message"])
        except InvalidLifecycleEvent:
            return False
    if is_on_failure_record(data):  # (redriven: its event)
        data = data.get("requestPayload")
    return isinstance(data, dict) and data.get("source") == disruption_events.HEALTH_SOURCE
