"""An SQS event source mapping, as Lambda runs one.

Pollers long-poll the queue, gather up to `BatchSize` messages (within `MaximumBatchingWindowInSeconds`),
and invoke the function with a real-shaped SQS event. A successful batch is deleted; a failed invocation
leaves the whole batch to come back after the visibility timeout; with `ReportBatchItemFailures` only the
reported messages stay. One poller per concurrency slot bounds the invocations in flight at
`MaximumConcurrency`. An invocation refused for the function's reserved concurrency (a throttle: the
function's other sources hold it) is tried again with a back-off while the batch's messages stay invisible;
when their visibility timeout would run out first, the mapping lets go and they show again in the queue,
their next receive counting towards `maxReceiveCount` (``concurrency.py``). Delays and redrive to the dead-letter queue after `maxReceiveCount` are SQS's own
business, which moto does at receive time, as AWS does.

Pollers long-poll for ``poll_wait`` seconds (Lambda's pollers for 20, the longest SQS allows: an idle mapping costs
a few receives a minute), each poll saying whose it is (``mapping_polls.py``): the sandbox's SQS gives a poll of a
mapping disabled in Lambda nothing, from the moment it is disabled (an operator's ``update-event-source-mapping``,
``aws/sqs_mapping_polls.py``), and `end_polls` ends the long polls under way of a source stopped while the AWS side
stays.

Each message's way through the mapping goes to the ``deliveries`` log: received (how many times, how long
after it was sent, and what for: the lifecycle record a work message names, or the instances a notification is
about), throttled, dropped, late or reordered by a fault, and the invocation that had it (how long it
took, whether it failed it). With it a scenario's log tells a slow sandbox from a slow product.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nodecycle_sandbox.mapping_polls import END_POLLS_HEADER, MAPPING_HEADER, POLLER_HEADER
from nodecycle_sandbox.runner.concurrency import THROTTLE_TIME_SCALE, throttle_backoff
from nodecycle_sandbox.runner.faults import RunnerFaults, record_of
from nodecycle_sandbox.runner.functions import FunctionSpec, SqsTrigger
from nodecycle_sandbox.runner.invokers import InvocationResult
from nodecycle_sandbox.runner.journal import Invocation, Journal, Throttle

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageTypeDef

_log = logging.getLogger(__name__)
# Lambda's poller backs off while its polls fail (the function's role refused sqs:ReceiveMessage, the queue gone):
# it documents no figures; the sandbox waits 1 s after the first failure, doubling, at most 16 s, and starts over
# once a poll answers (the role allowed again is polled within 16 s)
_POLL_BACKOFF_FIRST_SECONDS = 1.0
_POLL_BACKOFF_MAX_SECONDS = 16.0
_SYSTEM_ATTRIBUTES = (
    "ApproximateReceiveCount",
    "SentTimestamp",
    "SenderId",
    "ApproximateFirstReceiveTimestamp",
    "SequenceNumber",
    "MessageGroupId",
    "MessageDeduplicationId",
    "AWSTraceHeader",
)


def sqs_record(message: MessageTypeDef, *, queue_arn: str, region: str) -> dict[str, Any]:
    """One record of Lambda's SQS event."""
    attributes = message.get("Attributes") or {}
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {k: attributes[k] for k in _SYSTEM_ATTRIBUTES if k in attributes},
        "messageAttributes": {
            name: {
                "stringValue": value.get("StringValue"),
                "binaryValue": value.get("BinaryValue"),
                "stringListValues": [],
                "binaryListValues": [],
                "dataType": value["DataType"],
            }
            for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


def failed_message_ids(result: InvocationResult, batch: list[str], report_failures: bool) -> list[str]:
    """The messages that must go back to the queue after this invocation, as Lambda decides: all of them
    after a failed invocation; with ``ReportBatchItemFailures``, none for a null or empty response or failure
    list, the reported ones, or all of them for a response it cannot read as this batch's message ids (not an
    object, failures that are not a list, an empty or null identifier, a bad key name, a message not in the
    batch)."""
    if not result.ok:
        return list(batch)
    if not report_failures or result.response is None:
        return []
    if not isinstance(result.response, dict):
        return list(batch)  # not a batch response at all: Lambda's "invalid JSON response"
    failures = result.response.get("batchItemFailures")
    if failures is None:
        return []  # (a null failure list, or none: Lambda's complete success)
    if not isinstance(failures, list):
        # Not a list at all (an empty object or string, false, 0 included): not the response Lambda reads, a
        # failure of the whole batch; only an empty or a null list is a complete success
        return list(batch)
    try:
        reported = [item["itemIdentifier"] for item in failures]
    except (KeyError, TypeError):
        return list(batch)  # Lambda treats a malformed failure report as a failure of the whole batch
    if any(not isinstance(item, str) or item not in batch for item in reported):
        return list(batch)
    return reported


def _adding(headers: dict[str, str]) -> Callable[..., None]:
    """A botocore ``before-sign`` handler that adds ``headers`` to the request."""

    def add(request: Any, **_: Any) -> None:
        for name, value in headers.items():
            request.headers[name] = value

    return add


class _Closed(Exception):
    """A closed event source's poller asked for another request (see `SqsEventSource.close`)."""


class _PollFailures:
    """One poller's failures in a row: how long it waits before it polls again, and what it tells of each (one
    WARNING line; the first of a run, or one that fails otherwise than the one before, with its traceback: an
    operator reads the refusal once, not a traceback every second while a policy lasts)."""

    def __init__(self) -> None:
        self._failures = 0
        self._last: tuple[str, str] | None = None

    def answered(self) -> None:
        self._failures, self._last = 0, None

    def failed(self, source: str, error: Exception) -> float:
        code = str(((getattr(error, "response", None) or {}).get("Error") or {}).get("Code") or "")
        kind = (type(error).__name__, code)
        self._failures += 1
        delay = min(_POLL_BACKOFF_FIRST_SECONDS * 2 ** (self._failures - 1), _POLL_BACKOFF_MAX_SECONDS)
        _log.warning(
            "%s poll failed (%d in a row), polling again in %.0f s: %s",
            source,
            self._failures,
            delay,
            error,
            exc_info=kind != self._last,
        )
        self._last = kind
        return delay


class SqsEventSource:
    def __init__(
        self,
        *,
        spec: FunctionSpec,
        trigger: SqsTrigger,
        invoke: Callable[[FunctionSpec, Any], InvocationResult],
        journal: Journal,
        client_factory: Callable[[], SQSClient],
        region: str,
        concurrency: int,
        poll_wait: int,
        faults: RunnerFaults | None = None,
        fault_client_factory: Callable[[], SQSClient] | None = None,
        deliveries: logging.Logger | None = None,
        throttle_scale: float = THROTTLE_TIME_SCALE,
        mapping: str | None = None,
    ) -> None:
        # The mapping's UUID in Lambda, where an operator may disable it (the queue then stalls): the sandbox's SQS
        # gives its polls nothing while it is disabled. None: polls not gated (a source no mapping stands for).
        self._mapping = mapping
        # This source's pollers, as their long polls name them (`end_polls`)
        self._token = uuid.uuid4().hex
        self._faults = faults or RunnerFaults()
        self._throttle_scale = throttle_scale
        self._deliveries = deliveries or _log
        # Faults drop and put back messages as the account's administrator: they are the sandbox's doing, and
        # the function's role may not (and need not) change a message's visibility.
        self._fault_client_factory = fault_client_factory or client_factory
        self._spec = spec
        self._trigger = trigger
        self._invoke = invoke
        self._journal = journal
        self._client_factory = client_factory
        self._region = region
        self._concurrency = concurrency
        self._poll_wait = poll_wait
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        # Pollers with a batch in hand (from the end of its receive to the end of its delivery), and whether
        # the source is closed: a receive that answers after `close` delivers nothing.
        self._state = threading.Condition()
        self._busy = 0
        self._closed = False
        # The clients this source's pollers share (`_clients`), made by the first poller to start.
        self._shared: tuple[SQSClient, SQSClient] | None = None
        self._shared_lock = threading.Lock()

    @property
    def source(self) -> str:
        return f"sqs:{self._trigger.queue.logical_id}"

    @property
    def function(self) -> str:
        return self._spec.logical_id

    def start(self) -> None:
        for index in range(self._concurrency):
            thread = threading.Thread(
                target=self._poll, name=f"{self._spec.logical_id}-{self._trigger.name}-{index}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stopping.set()

    def join(self, deadline: float) -> None:
        """Wait for the pollers (and the invocations they are in) until `deadline` (time.monotonic())."""
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._threads = []

    def close(self, deadline: float) -> None:
        """After `stop`, when the AWS side goes away with the mapping (the sandbox's stop): wait, until
        `deadline`, for the batches in hand (their invocations, deletes and journal entries) but not for the
        long polls, which end with the AWS side (up to `poll_wait`, 20 s, of every sandbox's stop). A long
        poll that answers after this delivers nothing: its messages go with the AWS side, as do those of a batch
        still gathering in its batching window (not yet an invocation)."""
        with self._state:
            self._state.wait_for(lambda: self._busy == 0, timeout=max(0.0, deadline - time.monotonic()))
            self._closed = True
        self._threads = []

    def end_polls(self) -> None:
        """After `stop`, with the AWS side staying: end this source's long polls under way (each would hold
        `join` for up to `poll_wait`), as one ReceiveMessage that receives nothing. Best effort: a poll this
        fails to end still ends within `poll_wait`. A batch in hand is delivered (its deletes are not refused)."""
        headers = {POLLER_HEADER: self._token, END_POLLS_HEADER: "1"}
        try:
            client = self._fault_client_factory()  # (the account's: any caller may end them)
            client.meta.events.register("before-sign.sqs.ReceiveMessage", _adding(headers))
            client.receive_message(QueueUrl=self._trigger.queue.url, WaitTimeSeconds=0)
        except Exception as error:
            _log.debug("%s: could not end its long polls (%r)", self.source, error)

    def _clients(self) -> tuple[SQSClient, SQSClient]:
        """The mapping's client (the function's role) and the account's (for faults), one of each for all of
        this source's pollers: a botocore client is thread-safe, and its pool gives each poller a connection of
        its own (the factories size it). A client each cost every sandbox's start about 80 client creations
        (5 ms of CPU each), for nothing the AWS side can tell apart: each long poll is still a request on a
        connection of its own, under the same headers."""
        with self._shared_lock:
            if self._shared is None:
                client = self._client_factory()  # (it reads the queue's attributes)
                fault_client = self._fault_client_factory()  # faults may be armed later
                # Once closed, not even botocore's retry of a long poll cut by the AWS side's end: the next
                # sandbox's AWS side may have that port already, and queues of the same names.
                client.meta.events.register("before-send.sqs", self._refuse_once_closed)
                # (every poll says whose it is: the AWS side gates it by the mapping's state, and ends it at
                # `end_polls`)
                poller = {POLLER_HEADER: self._token}
                if self._mapping is not None:
                    poller[MAPPING_HEADER] = self._mapping
                client.meta.events.register("before-sign.sqs.ReceiveMessage", _adding(poller))
                self._shared = (client, fault_client)
            return self._shared

    def _poll(self) -> None:
        try:
            client, fault_client = self._clients()
        except Exception:
            if self._stopping.is_set():
                return  # the AWS side went away first during shutdown: `close` does not wait for a start
            raise
        failures = _PollFailures()
        while not self._stopping.is_set():
            try:
                messages, received_at = self._receive(client, failures)
                if not messages:
                    continue  # (nothing came, or stopping)
                with self._state:
                    if self._closed:
                        return  # (see close)
                    self._busy += 1
                try:
                    self._handle(client, fault_client, messages, received_at)
                finally:
                    with self._state:
                        self._busy -= 1
                        self._state.notify_all()
            except Exception as error:
                if self._stopping.is_set():
                    return  # the AWS side went away first during shutdown
                self._stopping.wait(failures.failed(self.source, error))

    def _refuse_once_closed(self, **_: Any) -> None:
        if self._closed:
            raise _Closed(self.source)

    def _handle(
        self,
        client: SQSClient,
        fault_client: SQSClient,
        messages: list[MessageTypeDef],
        received_at: float,
    ) -> None:
        """A received batch (maybe empty): through the faults, then to the function."""
        queue = self._trigger.queue
        self._log_received(messages)
        messages = self._faults.on_receive(
            queue.logical_id, fault_client, queue.url, messages, self._deliveries
        )
        if messages:
            again, alongside = self._faults.duplicates(queue.logical_id, fault_client, queue.url, messages)
            if again:
                self._deliveries.info(
                    "%s duplicated %s%s",
                    queue.logical_id,
                    " ".join(m["MessageId"] for m in again),
                    " (at the same time)" if alongside else "",
                )
            if alongside:
                self._deliver_both(client, messages, again, received_at)
            else:
                self._deliver(client, messages, received_at)
                if again:
                    self._deliver(client, again, received_at)

    def _log_received(self, messages: list[MessageTypeDef]) -> None:
        now = time.time()
        for message in messages:
            attributes = message.get("Attributes") or {}
            sent = int(attributes.get("SentTimestamp", 0)) / 1000
            about = record_of(message)
            self._deliveries.info(
                "%s received %s receives=%s age=%.1fs%s",
                self._trigger.queue.logical_id,
                message["MessageId"],
                attributes.get("ApproximateReceiveCount", "?"),
                now - sent if sent else float("nan"),
                f" for {about}" if about else "",
            )

    def _receive(self, client: SQSClient, failures: _PollFailures) -> tuple[list[MessageTypeDef], float]:
        """A batch, and when its first messages were received (their visibility timeout runs from then); each
        poll that answers (empty or not) ends the poller's run of failures."""
        trigger = self._trigger
        messages: list[MessageTypeDef] = []
        received_at = time.monotonic()
        window_end: float | None = None
        while len(messages) < trigger.batch_size and not self._stopping.is_set():
            wait = self._poll_wait
            if window_end is not None:
                remaining = window_end - time.monotonic()
                if remaining <= 0:
                    break
                # WaitTimeSeconds is whole seconds: below one, poll without waiting, in short steps.
                wait = min(wait, int(remaining))
                if wait == 0:
                    self._stopping.wait(min(remaining, 0.05))
            answer = client.receive_message(
                QueueUrl=trigger.queue.url,
                MaxNumberOfMessages=min(10, trigger.batch_size - len(messages)),
                WaitTimeSeconds=wait,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            failures.answered()
            received = answer.get("Messages", [])
            if received and not messages:
                received_at = time.monotonic()
            messages.extend(received)
            if messages and trigger.batching_window <= 0:
                break
            if messages and window_end is None:
                window_end = time.monotonic() + trigger.batching_window
        return messages, received_at

    def _deliver_both(
        self,
        client: SQSClient,
        messages: list[MessageTypeDef],
        again: list[MessageTypeDef],
        received_at: float,
    ) -> None:
        """The batch and its duplicate at once, as two pollers would (each invocation takes its own slot of
        the function's concurrency); the poller goes on when both are done."""
        twin = threading.Thread(
            target=self._deliver,
            args=(self._client_factory(), again, received_at),
            name=f"{self.source}-duplicate",
        )
        twin.start()
        try:
            self._deliver(client, messages, received_at)
        finally:
            twin.join()

    def _deliver(self, client: SQSClient, messages: list[MessageTypeDef], received_at: float) -> None:
        trigger = self._trigger
        event = {
            "Records": [sqs_record(m, queue_arn=trigger.queue.arn, region=self._region) for m in messages]
        }
        ids = [m["MessageId"] for m in messages]
        began = time.monotonic()
        result = self._invoke_while_invisible(event, ids, received_at)
        if result is None:
            return  # throttled until the batch's visibility timeout: its messages show again in the queue
        failed = failed_message_ids(result, ids, trigger.report_failures)
        self._deliveries.info(
            "%s invoked %s with %s in %.1fs: %s",
            trigger.queue.logical_id,
            self._spec.logical_id,
            " ".join(ids),
            time.monotonic() - began,
            f"failed {' '.join(failed)}" if failed else "ok",
        )
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), 10):
            chunk = done[start : start + 10]
            client.delete_message_batch(
                QueueUrl=trigger.queue.url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
        self._journal.record(
            Invocation.of(
                self._spec.logical_id, self.source, event, result, records=tuple(ids), failures=tuple(failed)
            )
        )

    def _invoke_while_invisible(
        self, event: dict[str, Any], ids: list[str], received_at: float
    ) -> InvocationResult | None:
        """The batch's invocation, tried again with a back-off while the function is throttled; None when
        the messages' visibility timeout (from ``received_at``) would run out before the next try."""
        queue = self._trigger.queue
        visible_at = received_at + queue.visibility_timeout
        throttles = 0
        while True:
            result = self._invoke(self._spec, event)
            if not result.throttled:
                return result
            throttles += 1
            delay = throttle_backoff(throttles, self._throttle_scale)
            returned = time.monotonic() + delay >= visible_at
            self._journal.record_throttle(
                Throttle(
                    self._spec.logical_id,
                    self.source,
                    time.time(),
                    "returned" if returned else "retry",
                    records=tuple(ids),
                )
            )
            self._deliveries.info(
                "%s throttled %s with %s (%d in a row): %s",
                queue.logical_id,
                self._spec.logical_id,
                " ".join(ids),
                throttles,
                "left to show again after the visibility timeout"
                if returned
                else f"tried again in {delay:.2f}s",
            )
            if returned or self._stopping.wait(delay):
                return None
