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
"""

from __future__ import annotations

from moto.core.utils import unix_time, unix_time_millis
from moto.sqs.models import Message, Queue, SQSBackend

# Bounds the latency of changes nobody signals (ChangeMessageVisibility to 0); idle cost is one scan.
_MAX_WAIT_SECONDS = 0.25


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


def install() -> None:
    Queue.wait_for_messages = _wait_for_messages  # type: ignore[method-assign]
    SQSBackend.is_message_valid_based_on_retention_period = _within_retention  # type: ignore[method-assign]
