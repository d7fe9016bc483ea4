"""SQS's DeleteMessage with a receipt handle that is not the message's latest.

Each receive of a message gives it a new receipt handle, and SQS deletes a message only by the handle of its
most recent receive: "if you use an old ReceiptHandle, the request will succeed, but the message might not be
deleted" (SQS API reference, DeleteMessage; the developer guide says it will not be). moto deleted a message by
any handle it ever had. So when a batch's invocation outlasted its visibility timeout and another poller
received its message again meanwhile (Lambda never extends a batch's visibility), the first invocation's end
deleted the message under the second: that second delivery could fail or time out and its message was still
gone, never redelivered, never counted towards ``maxReceiveCount``; on AWS it comes back.

Here a delete by an older handle succeeds and deletes nothing (the harsher reading), in DeleteMessage and in
DeleteMessageBatch alike (each entry its own success); a handle the message never had is refused as before, and
a message already deleted may be deleted again by any of its handles (moto's ``deleted_messages``, as SQS).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from moto.sqs.models import Queue

_MARKER = "_nodecycle_sandbox_latest_receipt"


def install() -> None:
    """Idempotent."""
    if getattr(Queue, _MARKER, False):
        return
    queue: Any = Queue
    queue.delete_message = _by_latest_receipt(Queue.delete_message)
    setattr(Queue, _MARKER, True)


def _by_latest_receipt(delete: Callable[[Queue, str], None]) -> Callable[[Queue, str], None]:
    @wraps(delete)
    def delete_message(self: Queue, receipt_handle: str) -> None:
        if receipt_handle not in self.deleted_messages:
            for message in list(self._messages):
                if message.had_receipt_handle(receipt_handle) and message.receipt_handle != receipt_handle:
                    return  # received again since: this handle deletes nothing (and SQS says nothing)
        delete(self, receipt_handle)

    return delete_message
