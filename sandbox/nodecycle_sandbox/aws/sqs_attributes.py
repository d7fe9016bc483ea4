"""Queue attributes held to SQS's ranges, where moto stores any number; a message's visibility changed as SQS
changes it.

CreateQueue and SetQueueAttributes take each of these attributes only within its range (the SQS API reference,
CreateQueue, ``Attributes``): ``DelaySeconds`` 0 to 900, ``MessageRetentionPeriod`` 60 to 1,209,600 (14 days),
``ReceiveMessageWaitTimeSeconds`` 0 to 20, ``VisibilityTimeout`` 0 to 43,200 (12 hours). SQS refuses the call
with ``InvalidAttributeValue`` ("Invalid value for the parameter VisibilityTimeout."), and the stack that
declares such a queue fails to deploy. moto created the queue (it checks ``MaximumMessageSize`` alone). A
``RedrivePolicy``'s ``maxReceiveCount`` is 1 to 1,000 (the developer guide's "Maximum receives"), refused
otherwise with ``InvalidParameterValue``; moto stored 0 and any count above.

SendMessage (and each entry of SendMessageBatch) takes ``DelaySeconds`` from 0 to 900 (the SQS API reference,
SendMessage: "Valid values: 0 to 900"): SQS refuses a negative delay as one past 900 (``InvalidParameterValue``,
"Value -1 for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= 0 and <= 900."; a batch's entry
fails alone). moto refused only the delays past 900, and sent a message delayed by -1 at once.

ChangeMessageVisibility (the SQS API reference) changes the visibility of a message in flight, by the receipt
handle of its latest receive, to 0 to 43,200 seconds from the call. moto changed it by any handle the message
ever had, for a message no longer in flight too, and took a negative timeout. Here, as SQS: a timeout out of
its range is ``InvalidParameterValue``; a handle the message had before its latest receive is refused as
expired (``InvalidParameterValue``, "The receipt handle has expired": AWS's knowledge center, the error of an
old handle; the API reference leaves a standard queue's answer open, the harsher reading); a message whose
visibility timeout ran out (visible again, not received since) is ``MessageNotInflight``. So a consumer that
shortens a failed message's timeout after another poller received it again (a duplicate delivery, an
invocation that outlived its batch's timeout) is refused, as on AWS, and the message keeps its visibility.

A visibility lasts 12 hours in all from its receive: a change may set it within what is left of them (the API
reference's example: 30 minutes extended by 2 hours leaves 9 h 30 min), past that ``InvalidParameterValue``.
moto counted the 12 hours from the message's sending, and refused a change at the receive of a message that had
waited in its queue for hours (a stalled consumer, a dead-letter queue redriven), where SQS takes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any

from moto.sqs.exceptions import (
    InvalidAttributeValue,
    InvalidParameterValue,
    ReceiptHandleIsInvalid,
    SQSException,
)
from moto.sqs.models import Message, Queue, SQSBackend

from nodecycle_sandbox.aws.sqs_timing import BACKEND_LOCK, unix_time_millis

RANGES = {
    "DelaySeconds": (0, 900),
    "MessageRetentionPeriod": (60, 1_209_600),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, 43_200),
}
MAX_RECEIVE_COUNT = (1, 1000)
_MARKER = "_nodecycle_sandbox_queue_attributes"
_RECEIVED_AT = "_nodecycle_received_at"  # a message's latest receive (unix ms)


class MessageNotInflight(SQSException):
    def __init__(self) -> None:
        super().__init__("MessageNotInflight", "The message referred to isn't in flight.")


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(Queue, _MARKER, False):
        return
    original = Queue._set_attributes

    def set_attributes(self: Queue, attributes: dict[str, Any], now: float | None = None) -> None:
        for name, (low, high) in RANGES.items():
            if name in attributes and not low <= int(attributes[name]) <= high:
                raise InvalidAttributeValue(name)
        _check_redrive(attributes.get("RedrivePolicy"))
        original(self, attributes, now)

    Queue._set_attributes = set_attributes  # type: ignore[method-assign]
    backend: Any = SQSBackend
    backend.send_message = _delay_within_range(SQSBackend.send_message)
    message: Any = Message
    message.mark_received = _remembering_the_receive(Message.mark_received)
    backend.change_message_visibility = _as_sqs_changes_it
    backend.change_message_visibility_batch = _each_entry_alone
    setattr(Queue, _MARKER, True)


def _check_redrive(policy: Any) -> None:
    """A redrive policy's maxReceiveCount is 1 to 1,000 (the SQS developer guide's "Maximum receives"): SQS refuses
    the queue's creation or change; moto stored 0, with which a message received once moves to the dead-letter
    queue, and any count above."""
    if not policy:
        return
    document = json.loads(policy) if isinstance(policy, str) else policy
    count = document.get("maxReceiveCount") if isinstance(document, dict) else None
    if count is None:
        return  # (moto's own answer for a policy without one)
    low, high = MAX_RECEIVE_COUNT
    if not str(count).lstrip("-").isdigit() or not low <= int(count) <= high:
        raise InvalidParameterValue(
            f"Value {policy} for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: "
            f"{count}, valid values are from {low} to {high} both inclusive."
        )


def _delay_within_range(send: Callable[..., Message]) -> Callable[..., Message]:
    @wraps(send)
    def send_message(self: SQSBackend, *args: Any, **kwargs: Any) -> Message:
        delay = kwargs.get("delay_seconds", args[3] if len(args) > 3 else None)
        low, high = RANGES["DelaySeconds"]
        if delay is not None and int(delay) < low:
            raise InvalidParameterValue(
                f"Value {delay} for parameter DelaySeconds is invalid. Reason: DelaySeconds must be >= {low} and "
                f"<= {high}."
            )
        return send(self, *args, **kwargs)

    return send_message


def _remembering_the_receive(mark_received: Callable[..., None]) -> Callable[..., None]:
    @wraps(mark_received)
    def marked(self: Message, visibility_timeout: int | None = None) -> None:
        mark_received(self, visibility_timeout)
        setattr(self, _RECEIVED_AT, unix_time_millis())  # (moto's Message keeps no receive time)

    return marked


def _as_sqs_changes_it(
    self: SQSBackend, queue_name: str, receipt_handle: str, visibility_timeout: int
) -> None:
    low, high = RANGES["VisibilityTimeout"]
    if not low <= int(visibility_timeout) <= high:
        raise InvalidParameterValue(
            f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Must be between "
            f"{low} and {high}, if provided."
        )
    queue = self.get_queue(queue_name)
    with BACKEND_LOCK:  # (the message's state read and changed in one decision, as SQS's)
        for message in queue._messages:
            if not message.had_receipt_handle(receipt_handle):
                continue
            if message.receipt_handle != receipt_handle:
                raise InvalidParameterValue(
                    f"Value {receipt_handle} for parameter ReceiptHandle is invalid. Reason: The receipt "
                    "handle has expired."
                )
            if message.visible:
                raise MessageNotInflight
            now = unix_time_millis()
            received = float(getattr(message, _RECEIVED_AT, now))
            if now + int(visibility_timeout) * 1000 - received > high * 1000:
                raise InvalidParameterValue(
                    f"Value {visibility_timeout} for parameter VisibilityTimeout is invalid. Reason: Total "
                    f"VisibilityTimeout for the message is beyond the limit [{high} seconds]"
                )
            message.change_visibility(int(visibility_timeout))
            if message.visible and message in queue.pending_messages:  # (as moto's change: visible again)
                queue.pending_messages.remove(message)
            return
        raise ReceiptHandleIsInvalid


def _each_entry_alone(
    self: SQSBackend, queue_name: str, entries: list[dict[str, Any]]
) -> tuple[list[str], list[dict[str, Any]]]:
    """ChangeMessageVisibilityBatch: each entry's success or failure of its own (moto's let a refusal other than
    an unknown handle fail the whole call)."""
    success: list[str] = []
    failed: list[dict[str, Any]] = []
    for entry in entries:
        try:
            self.change_message_visibility(
                queue_name=queue_name,
                receipt_handle=entry["ReceiptHandle"],
                visibility_timeout=int(entry.get("VisibilityTimeout", 0)),
            )
        except SQSException as error:
            failed.append(
                {"Id": entry["Id"], "SenderFault": True, "Code": error.code, "Message": error.message}
            )
            continue
        success.append(entry["Id"])
    return success, failed
