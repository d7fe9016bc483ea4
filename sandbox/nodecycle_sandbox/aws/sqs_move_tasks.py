"""SQS's dead-letter queue redrive (``StartMessageMoveTask``), which moto does not implement.

The runbook's answer to dead letters is ``aws sqs start-message-move-task --source-arn <dead-letter queue>``
(each message back to the queue it came from) or with ``--destination-arn`` (all of them to that queue: what
Lambda's on-failure destination and EventBridge's rule dead-letter config wrote there came from no queue). moto
answered ``NotImplementedError``: in the sandbox the runbook's redrive could not be tried at all. As SQS does
(SQS API reference, StartMessageMoveTask):

- the source must be a dead-letter queue of some queue (a queue whose ``RedrivePolicy`` names it), else
  ``InvalidParameterValue``;
- without a destination, each message goes back to the queue that moved it there (the ``DeadLetterQueueSourceArn``
  SQS keeps with it); a message that no queue moved there (sent to it directly) cannot be, and the task ends
  ``FAILED`` with the messages before it moved;
- a message moved keeps its body and message attributes, under a new message id, and leaves the source.

The task runs at once, on the messages visible when it starts (SQS runs it in the background, at most
``MaxNumberOfMessagesPerSecond``); ``ListMessageMoveTasks`` reports it.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from typing import Any

from moto.core.responses import ActionResult
from moto.sqs.exceptions import InvalidParameterValue, QueueDoesNotExist
from moto.sqs.models import Message, Queue, SQSBackend, sqs_backends
from moto.sqs.responses import SQSResponse

SOURCE_ATTRIBUTE = "DeadLetterQueueSourceArn"
_MARKER = "_nodecycle_sandbox_move_tasks"
_TASKS: dict[str, list[dict[str, Any]]] = {}  # source ARN -> its tasks, newest first
_LOCK = threading.Lock()


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(SQSResponse, _MARKER, False):
        return
    receive = SQSBackend.receive_message

    def receive_message(self: SQSBackend, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        # (moto moves a message past maxReceiveCount to the dead-letter queue inside the receive: which queue
        # it came from is told here, as SQS keeps it)
        queue = self.get_queue(queue_name)
        before = {m.id for m in queue._messages} if queue.dead_letter_queue is not None else set()
        result = receive(self, queue_name, *args, **kwargs)
        if before and queue.dead_letter_queue is not None:
            for message in queue.dead_letter_queue._messages:
                if message.id in before:
                    message.system_attributes.setdefault(SOURCE_ATTRIBUTE, queue.queue_arn)
        return result

    SQSBackend.receive_message = receive_message  # type: ignore[method-assign]
    SQSResponse.start_message_move_task = _start  # type: ignore[attr-defined]
    SQSResponse.list_message_move_tasks = _list  # type: ignore[attr-defined]
    setattr(SQSResponse, _MARKER, True)


def _queue_of(backend: SQSBackend, arn: str) -> Queue:
    for queue in backend.queues.values():
        if queue.queue_arn == arn:
            return queue
    raise QueueDoesNotExist()


def _start(self: SQSResponse) -> ActionResult:
    backend: SQSBackend = sqs_backends[self.current_account][self.region]
    source_arn = str(self._get_param("SourceArn"))
    destination_arn = self._get_param("DestinationArn")
    source = _queue_of(backend, source_arn)
    if not any(q.dead_letter_queue is source for q in backend.queues.values()):
        raise InvalidParameterValue("Source queue must be configured as a Dead Letter Queue.")
    destination = _queue_of(backend, str(destination_arn)) if destination_arn else None
    handle = str(uuid.uuid4())
    task: dict[str, Any] = {
        "TaskHandle": handle,
        "Status": "RUNNING",
        "SourceArn": source_arn,
        "ApproximateNumberOfMessagesMoved": 0,
        "ApproximateNumberOfMessagesToMove": 0,
        "StartedTimestamp": int(time.time() * 1000),
    }
    if destination_arn:
        task["DestinationArn"] = str(destination_arn)
    with _LOCK:
        if any(t["Status"] == "RUNNING" for t in _TASKS.get(source_arn, [])):
            raise InvalidParameterValue(
                "There is already a task running. Only one active task is allowed per source."
            )
        _TASKS.setdefault(source_arn, []).insert(0, task)
    now = time.time()
    visible = [m for m in list(source._messages) if m.visible_at <= now and m.delayed_until <= now]
    task["ApproximateNumberOfMessagesToMove"] = len(visible)
    for message in visible:
        origin = destination or _origin(backend, message)
        if origin is None:
            task["Status"] = "FAILED"
            task["FailureReason"] = (
                f"message {message.id} was not moved to the dead-letter queue by a queue's redrive policy: it has no "
                "source queue to go back to (name a DestinationArn)"
            )
            return ActionResult({"TaskHandle": handle})
        backend.send_message(
            origin.name,
            message.body,
            message_attributes=copy.deepcopy(message.message_attributes),
        )
        source._messages.remove(message)
        task["ApproximateNumberOfMessagesMoved"] += 1
    task["Status"] = "COMPLETED"
    return ActionResult({"TaskHandle": handle})


def _origin(backend: SQSBackend, message: Message) -> Queue | None:
    arn = message.system_attributes.get(SOURCE_ATTRIBUTE)
    return _queue_of(backend, str(arn)) if arn else None


def _list(self: SQSResponse) -> ActionResult:
    source_arn = str(self._get_param("SourceArn"))
    maximum = int(self._get_param("MaxResults") or 1)
    with _LOCK:
        tasks = [dict(t) for t in _TASKS.get(source_arn, [])[:maximum]]
    return ActionResult({"Results": tasks})
