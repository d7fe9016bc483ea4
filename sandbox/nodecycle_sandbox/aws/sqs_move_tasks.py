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

The task runs in the background, as SQS runs it: StartMessageMoveTask answers its handle with nothing moved yet,
and ``ListMessageMoveTasks`` shows it ``RUNNING`` while ``ApproximateNumberOfMessagesMoved`` grows towards
``ApproximateNumberOfMessagesToMove`` (the messages visible when it started), at most
``MaxNumberOfMessagesPerSecond`` a second (1 to 500; without it, ``DEFAULT_RATE``), until ``COMPLETED``. "Only one
active message movement task is supported per queue at any given time": a second StartMessageMoveTask of the
same source while one runs is refused. ``CancelMessageMoveTask`` stops a running one (``CANCELLING``, then
``CANCELLED``: what moved stays moved); a task that is not running cannot be cancelled (the API reference: "only
when the current status is RUNNING"; its error code is not documented, the harsher reading taken: refused). A
message received (in flight) when its turn comes is not moved, and not counted.
"""

from __future__ import annotations

import copy
import threading
import time
import uuid
from typing import Any

from moto.core.responses import ActionResult
from moto.sqs.exceptions import InvalidParameterValue, QueueDoesNotExist, SQSException
from moto.sqs.models import Message, Queue, SQSBackend, sqs_backends
from moto.sqs.responses import SQSResponse

from nodecycle_sandbox.aws.sqs_timing import BACKEND_LOCK

SOURCE_ATTRIBUTE = "DeadLetterQueueSourceArn"
# Messages a second of a task started without MaxNumberOfMessagesPerSecond (SQS "optimizes the rate based on the
# queue message backlog size"): quick, but never all at once
DEFAULT_RATE = 50
MAX_RATE = 500  # the API reference's maximum
_MARKER = "_nodecycle_sandbox_move_tasks"
# A source queue's tasks, newest first, kept on the queue: a queue made again (a moto reset, the next test) has
# none, and a task still running in a reset moto blocks no new one
_QUEUE_TASKS = "_nodecycle_move_tasks"
_HANDLES: dict[str, dict[str, Any]] = {}  # task handle -> its task
_CANCELLED: dict[str, threading.Event] = {}  # task handle -> set when it is cancelled
_LOCK = threading.Lock()


class ResourceNotFound(SQSException):
    code = "ResourceNotFoundException"

    def __init__(self, message: str) -> None:
        super().__init__(self.code, message)


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
    SQSResponse.cancel_message_move_task = _cancel  # type: ignore[attr-defined]
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
    rate = self._get_param("MaxNumberOfMessagesPerSecond")
    source = _queue_of(backend, source_arn)
    if not any(q.dead_letter_queue is source for q in backend.queues.values()):
        raise InvalidParameterValue("Source queue must be configured as a Dead Letter Queue.")
    destination = _queue_of(backend, str(destination_arn)) if destination_arn else None
    if rate is not None and not 1 <= int(rate) <= MAX_RATE:
        raise InvalidParameterValue(f"MaxNumberOfMessagesPerSecond must be between 1 and {MAX_RATE}.")
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
    if rate is not None:
        task["MaxNumberOfMessagesPerSecond"] = int(rate)
    with _LOCK:
        if any(t["Status"] in ("RUNNING", "CANCELLING") for t in _tasks_of(source)):
            raise InvalidParameterValue(
                "There is already a task running. Only one active task is allowed per source."
            )
        _tasks_of(source).insert(0, task)
        _HANDLES[handle] = task
        cancelled = _CANCELLED[handle] = threading.Event()
    with BACKEND_LOCK:
        now = time.time()
        visible = [m for m in list(source._messages) if m.visible_at <= now and m.delayed_until <= now]
    task["ApproximateNumberOfMessagesToMove"] = len(visible)
    mover = threading.Thread(
        target=_move,
        args=(
            backend,
            task,
            source,
            destination,
            visible,
            1.0 / (int(rate) if rate else DEFAULT_RATE),
            cancelled,
        ),
        name=f"sqs-move-task-{handle[:8]}",
        daemon=True,
    )
    mover.start()
    return ActionResult({"TaskHandle": handle})


def _move(
    backend: SQSBackend,
    task: dict[str, Any],
    source: Queue,
    destination: Queue | None,
    messages: list[Message],
    interval: float,
    cancelled: threading.Event,
) -> None:
    """The task's messages one at a time, ``interval`` seconds apart (the first one too: nothing moves before
    StartMessageMoveTask has answered)."""
    status = "COMPLETED"
    for message in messages:
        if cancelled.wait(interval):
            break
        try:
            origin = destination or _origin(backend, message)
        except QueueDoesNotExist:
            origin = None  # (its queue deleted since: below)
        with BACKEND_LOCK:
            if origin is not None and origin.name in backend.queues and source.name in backend.queues:
                if message in source._messages and message.visible_at <= time.time():
                    backend.send_message(
                        origin.name,
                        message.body,
                        message_attributes=copy.deepcopy(message.message_attributes),
                    )
                    source._messages.remove(message)
                    with _LOCK:
                        task["ApproximateNumberOfMessagesMoved"] += 1
                # (else received or deleted since the task started: not moved)
                continue
        status = "FAILED"
        task["FailureReason"] = (
            f"the queue of message {message.id} was deleted"
            if destination is not None or message.system_attributes.get(SOURCE_ATTRIBUTE)
            else f"message {message.id} was not moved to the dead-letter queue by a queue's redrive policy: it has "
            "no source queue to go back to (name a DestinationArn)"
        )
        break
    with _LOCK:
        task["Status"] = "CANCELLED" if cancelled.is_set() else status
        _CANCELLED.pop(task["TaskHandle"], None)


def _tasks_of(queue: Queue) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = queue.__dict__.setdefault(_QUEUE_TASKS, [])
    return tasks


def _origin(backend: SQSBackend, message: Message) -> Queue | None:
    arn = message.system_attributes.get(SOURCE_ATTRIBUTE)
    return _queue_of(backend, str(arn)) if arn else None


def _list(self: SQSResponse) -> ActionResult:
    backend: SQSBackend = sqs_backends[self.current_account][self.region]
    source = _queue_of(backend, str(self._get_param("SourceArn")))
    maximum = int(self._get_param("MaxResults") or 1)
    with _LOCK:
        tasks = [dict(t) for t in _tasks_of(source)[:maximum]]
    return ActionResult({"Results": tasks})


def _cancel(self: SQSResponse) -> ActionResult:
    handle = str(self._get_param("TaskHandle"))
    with _LOCK:
        task = _HANDLES.get(handle)
        if task is None:
            raise ResourceNotFound("The specified task handle does not exist.")
        if task["Status"] != "RUNNING":
            raise InvalidParameterValue(
                f"The task is {task['Status']}: only a RUNNING task can be cancelled."
            )
        task["Status"] = "CANCELLING"
        _CANCELLED[handle].set()
        moved = task["ApproximateNumberOfMessagesMoved"]
    return ActionResult({"ApproximateNumberOfMessagesMoved": moved})
