"""Long polling that wakes when a delayed or in-flight message becomes visible, and receives that do not
recompute every queue attribute per message.

moto's long poll waits for a "new message" signal in steps of one second, so a message whose `DelaySeconds`
or visibility timeout runs out is seen up to a second late. The disruption budget hands a freed slot to the
next waiter with such messages, and the benchmarks measure that hand-over, so the wait is cut at the next
due time instead (and at a short cap, because a visibility change does not signal waiters).

moto checks each message it returns against the queue's retention period by computing all of the queue's
attributes, three of which count every message in the queue: with hundreds of lifecycles' messages in the
drain queue that was a tenth of the AWS process's CPU in a 90-node refresh (py-spy). The retention period
is read directly instead; the check is the same.

moto also reads the clock through a datetime subtraction, twice per message for each of those counts (every
SendMessage computes the queue's attributes too): SQS's models read it from `time.time()` instead, the same
instant in the same unit (both follow a moved clock), at a twentieth of the cost.

moto's receive walks the queue's pending message groups while other requests' threads change them ("Set
changed size during iteration": an HTTP 500 that SQS does not answer); receives, sends and deletes of one
process take one lock instead, as SQS's own decisions are atomic.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from functools import wraps
from typing import Any

from moto.core import utils as moto_time
from moto.sqs import models
from moto.sqs.models import Message, Queue, SQSBackend

from nodecycle_sandbox.aws.one_at_a_time import one_at_a_time

# Bounds the latency of changes nobody signals (ChangeMessageVisibility to 0); idle cost is one scan.
_MAX_WAIT_SECONDS = 0.25


def unix_time(dt: datetime | None = None) -> float:
    return time.time() if dt is None else moto_time.unix_time(dt)


def unix_time_millis(dt: datetime | None = None) -> float:
    return time.time() * 1000.0 if dt is None else moto_time.unix_time_millis(dt)


def _wait_for_messages(self: Queue, timeout: int) -> None:
    with self._messages_lock:
        now = unix_time_millis()
        due = [
            max(message.visible_at, message.delayed_until)
            for message in self._messages
            if message.visible_at > now or message.delayed_until > now
        ]
        wait = min(float(timeout), _MAX_WAIT_SECONDS)
        if due:
            wait = min(wait, max(0.0, (min(due) - now) / 1000) + 0.002)
        self._messages_lock.wait_for(lambda: self.messages, timeout=wait)


def _within_retention(self: SQSBackend, queue_name: str, message: Message) -> bool:
    # moto sets each attribute of a queue as a Python attribute of the same name, snake-cased
    retention = int(getattr(self.get_queue(queue_name), "message_retention_period"))  # noqa: B009
    return bool(retention + message.sent_timestamp / 1000 > unix_time())  # type: ignore[operator]


BACKEND_LOCK = threading.RLock()


def _locked_receive(receive: Callable[..., Any]) -> Callable[..., Any]:
    """A long poll waits outside the lock: each of its passes takes it (the wait is `wait_for_messages`)."""

    @wraps(receive)
    def receive_message(
        self: SQSBackend, queue_name: str, count: int, wait_seconds_timeout: int, *args: Any, **kwargs: Any
    ) -> Any:
        deadline = time.monotonic() + wait_seconds_timeout
        queue = self.get_queue(queue_name)
        while True:
            with BACKEND_LOCK:
                received = receive(self, queue_name, count, 0, *args, **kwargs)
            left = deadline - time.monotonic()
            if received or left <= 0:
                return received
            queue.wait_for_messages(left)  # type: ignore[arg-type]  # moto types it int; a float waits as well

    return receive_message


def install() -> None:
    if getattr(SQSBackend, "_nodecycle_sqs_timing", False):
        return
    models.unix_time = unix_time
    models.unix_time_millis = unix_time_millis
    Queue.wait_for_messages = _wait_for_messages  # type: ignore[method-assign]
    SQSBackend.is_message_valid_based_on_retention_period = _within_retention  # type: ignore[method-assign]
    SQSBackend.receive_message = _locked_receive(SQSBackend.receive_message)  # type: ignore[method-assign]
    one_at_a_time(
        SQSBackend,
        (
            "send_message",
            "send_message_batch",
            "delete_message",
            "delete_message_batch",
            "change_message_visibility",
            "change_message_visibility_batch",
            "purge_queue",
        ),
        BACKEND_LOCK,
    )
    SQSBackend._nodecycle_sqs_timing = True  # type: ignore[attr-defined]
