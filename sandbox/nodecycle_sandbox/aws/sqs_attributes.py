"""Queue attributes held to SQS's ranges, where moto stores any number.

CreateQueue and SetQueueAttributes take each of these attributes only within its range (the SQS API reference,
CreateQueue, ``Attributes``): ``DelaySeconds`` 0 to 900, ``MessageRetentionPeriod`` 60 to 1,209,600 (14 days),
``ReceiveMessageWaitTimeSeconds`` 0 to 20, ``VisibilityTimeout`` 0 to 43,200 (12 hours). SQS refuses the call
with ``InvalidAttributeValue`` ("Invalid value for the parameter VisibilityTimeout."), and the stack that
declares such a queue fails to deploy. moto created the queue (it checks ``MaximumMessageSize`` alone).
"""

from __future__ import annotations

from typing import Any

from moto.sqs.exceptions import InvalidAttributeValue
from moto.sqs.models import Queue

RANGES = {
    "DelaySeconds": (0, 900),
    "MessageRetentionPeriod": (60, 1_209_600),
    "ReceiveMessageWaitTimeSeconds": (0, 20),
    "VisibilityTimeout": (0, 43_200),
}
_MARKER = "_nodecycle_sandbox_queue_attributes"


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(Queue, _MARKER, False):
        return
    original = Queue._set_attributes

    def set_attributes(self: Queue, attributes: dict[str, Any], now: float | None = None) -> None:
        for name, (low, high) in RANGES.items():
            if name in attributes and not low <= int(attributes[name]) <= high:
                raise InvalidAttributeValue(name)
        original(self, attributes, now)

    Queue._set_attributes = set_attributes  # type: ignore[method-assign]
    setattr(Queue, _MARKER, True)
