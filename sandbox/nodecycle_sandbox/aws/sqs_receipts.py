"""SQS's DeleteMessage with a receipt handle that is not the message's latest; a duplicate delivery's receive.

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

from moto.core.responses import EmptyResult
from moto.sqs.exceptions import ReceiptHandleIsInvalid
from moto.sqs.models import Queue
from moto.sqs.responses import SQSResponse

from nodecycle_sandbox.sqs_receive_again import (
    RECEIPT_HANDLE_HEADER,
    RECEIVE_AGAIN_HEADER,
    RECEIVE_COUNT_HEADER,
)

_MARKER = "_nodecycle_sandbox_latest_receipt"


def install() -> None:
    """Idempotent."""
    if getattr(Queue, _MARKER, False):
        return
    queue: Any = Queue
    queue.delete_message = _by_latest_receipt(Queue.delete_message)
    response: Any = SQSResponse
    response.change_message_visibility = _received_again(SQSResponse.change_message_visibility)
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


# A duplicate delivery, as the runner's ``sqs-duplicate`` fault makes one: SQS delivers a message at least once,
# and its second delivery is a receive of its own, with a new receipt handle and one more receive counted (the
# first handle then deletes nothing, above). No SQS API receives one given message, so the runner asks for it
# with a ChangeMessageVisibility of the handle in hand that carries this header: the message is received again
# (invisible for the queue's visibility timeout from now), and the answer's headers say its new handle and
# receive count. Without the header, ChangeMessageVisibility is moto's.


def _received_again(change: Callable[[SQSResponse], Any]) -> Callable[[SQSResponse], Any]:
    @wraps(change)
    def change_message_visibility(self: SQSResponse) -> Any:
        if not self.headers.get(RECEIVE_AGAIN_HEADER):
            return change(self)
        queue: Any = self.sqs_backend.get_queue(
            self._get_queue_name()
        )  # (moto sets its attributes dynamically)
        handle = self._get_param("ReceiptHandle")
        for message in list(queue._messages):
            if message.receipt_handle == handle:
                message.mark_received(visibility_timeout=queue.visibility_timeout)
                self.response_headers[RECEIPT_HANDLE_HEADER] = str(message.receipt_handle)
                self.response_headers[RECEIVE_COUNT_HEADER] = str(message.approximate_receive_count)
                return EmptyResult()
        raise ReceiptHandleIsInvalid  # deleted, or received again since: no duplicate of it to make

    return change_message_visibility
