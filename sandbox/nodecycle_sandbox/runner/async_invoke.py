"""Asynchronous invocation (EventBridge rules and schedules -> Lambda), with Lambda's retry policy.

A failed event is retried `MaximumRetryAttempts` times (2 by default) after a back-off (about a minute, then
two, on AWS; seconds in the sandbox) while its retry would be younger than `MaximumEventAgeInSeconds`, then sent
to the function's dead-letter queue or on-failure destination if the template configures one
("RetriesExhausted", or "EventAgeExceeded"), else dropped, as Lambda does. An event refused for the function's
reserved concurrency (a throttle) waits in Lambda's queue and is tried again with an exponential back-off,
without counting as a retry attempt, until it is older than `MaximumEventAgeInSeconds`; then it goes to the same
failure targets ("EventAgeExceeded"), see ``concurrency.py``. A function whose reserved concurrency is 0 (stopped
by an operator) is not waited for: each event goes to them at once, never run ("ZeroReservedConcurrency"), as
Lambda does since 2021. Faults (``runner/faults.py``) may run an event late, or twice.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nodecycle_sandbox.runner.concurrency import THROTTLE_TIME_SCALE, throttle_backoff
from nodecycle_sandbox.runner.faults import INSTANCE_ID, EventFate, RunnerFaults
from nodecycle_sandbox.runner.functions import FunctionSpec
from nodecycle_sandbox.runner.invokers import InvocationResult
from nodecycle_sandbox.runner.journal import Invocation, Journal, Throttle

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

_log = logging.getLogger(__name__)

# The on-failure condition of an event for a function whose reserved concurrency is 0, and what its dead-letter
# message says in place of an error (Lambda never tried it)
ZERO_CONCURRENCY = "ZeroReservedConcurrency"
ZERO_CONCURRENCY_MESSAGE = "Function not invoked: its reserved concurrency is 0"


@dataclass
class _Queued:
    """An event in Lambda's queue for the function: when Lambda took it, and how it fared so far."""

    accepted: float = field(default_factory=time.monotonic)
    attempt: int = 1  # the number of the next invocation that runs the handler
    throttles: int = 0  # in a row, for the back-off


class AsyncInvoker:
    def __init__(
        self,
        *,
        invoke: Callable[[FunctionSpec, Any], InvocationResult],
        journal: Journal,
        sqs: SQSClient,
        sender: Callable[[FunctionSpec], SQSClient],
        retry_delays: tuple[float, ...],
        max_workers: int,
        faults: RunnerFaults | None = None,
        throttle_scale: float = THROTTLE_TIME_SCALE,
        deliveries: logging.Logger | None = None,
        reserved: Callable[[str], int | None] | None = None,
    ) -> None:
        self._faults = faults or RunnerFaults()
        # the function's reserved concurrency now (an operator may set it to 0): None, none reserved
        self._reserved = reserved or (lambda function: None)
        self._throttle_scale = throttle_scale
        self._deliveries = deliveries or _log
        self._invoke = invoke
        self._journal = journal
        self._sqs = sqs
        self._sender = sender
        self._sqs_lock = threading.Lock()
        self._retry_delays = retry_delays
        self._executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="lambda-async")
        self._stopping = threading.Event()

    def submit(self, spec: FunctionSpec, event: Any, source: str) -> None:
        if self._stopping.is_set():
            return
        # (the firing names the instances the event is about, so that a judge can tell whose lifecycle it held)
        about = " ".join(dict.fromkeys(INSTANCE_ID.findall(json.dumps(event))))
        fate = self._faults.on_event(spec.logical_id, f"{source} {about}".strip())
        if fate.delay:
            timer = threading.Timer(fate.delay, self._submit, (spec, event, source, fate))
            timer.daemon = True
            timer.start()
        else:
            self._submit(spec, event, source, fate)

    def _submit(self, spec: FunctionSpec, event: Any, source: str, fate: EventFate) -> None:
        try:
            self._executor.submit(self._run_all, spec, event, source, fate.again and not fate.alongside)
            if fate.alongside:
                self._executor.submit(self._run, spec, event, source)  # at the same time as the first
        except RuntimeError:
            return  # the runner stopped while a late event waited: it is dropped with the sandbox

    def _run_all(self, spec: FunctionSpec, event: Any, source: str, twice: bool) -> None:
        for _ in range(2 if twice else 1):
            self._run(spec, event, source)

    def stop(self) -> None:
        self._stopping.set()
        self._executor.shutdown(wait=True, cancel_futures=True)  # (a late event's timer submits nothing now)

    def _run(self, spec: FunctionSpec, event: Any, source: str, queued: _Queued | None = None) -> None:
        queued = queued or _Queued()
        attempts = 1 + spec.async_retries
        while not self._stopping.is_set():
            result = self._invoke(spec, event)
            if result.throttled and self._reserved(spec.logical_id) == 0:
                self._stopped(spec, event, source, result)
                return
            if result.throttled:
                self._throttled(spec, event, source, queued, result)
                return
            queued.throttles = 0
            self._journal.record(
                Invocation.of(spec.logical_id, source, event, result, attempt=queued.attempt)
            )
            if result.ok:
                return
            if queued.attempt >= attempts:
                self._dead_letter(spec, event, result, queued.attempt, "RetriesExhausted")
                return
            delay = self._retry_delays[min(queued.attempt - 1, len(self._retry_delays) - 1)]
            if time.monotonic() + delay - queued.accepted > spec.max_event_age * self._throttle_scale:
                # (Lambda sends no event older than its maximum age: its retry would be)
                self._dead_letter(spec, event, result, queued.attempt, "EventAgeExceeded")
                return
            if self._stopping.wait(delay):
                return
            queued.attempt += 1

    def _throttled(
        self, spec: FunctionSpec, event: Any, source: str, queued: _Queued, result: InvocationResult
    ) -> None:
        """Back to Lambda's queue for a later try, in a timer (the event holds no worker while it waits), or to
        the failure targets when it would be older than its maximum age by then."""
        queued.throttles += 1
        delay = throttle_backoff(queued.throttles, self._throttle_scale)
        expired = time.monotonic() + delay - queued.accepted > spec.max_event_age * self._throttle_scale
        about = " ".join(dict.fromkeys(INSTANCE_ID.findall(json.dumps(event))))
        self._journal.record_throttle(
            Throttle(spec.logical_id, source, time.time(), "expired" if expired else "retry")
        )
        self._deliveries.info(
            "%s throttled %s %s (%d in a row): %s",
            source,
            spec.logical_id,
            about,
            queued.throttles,
            "older than its maximum age, given up" if expired else f"tried again in {delay:.2f}s",
        )
        if expired:
            self._dead_letter(spec, event, result, queued.attempt - 1, "EventAgeExceeded")
            return
        timer = threading.Timer(delay, self._retry, (spec, event, source, queued))
        timer.daemon = True
        timer.start()

    def _stopped(self, spec: FunctionSpec, event: Any, source: str, result: InvocationResult) -> None:
        """An event for a function whose reserved concurrency is 0: to the failure targets at once, never run."""
        self._journal.record_throttle(Throttle(spec.logical_id, source, time.time(), ZERO_CONCURRENCY))
        self._deliveries.info(
            "%s throttled %s %s: its reserved concurrency is 0, sent to its failure targets at once",
            source,
            spec.logical_id,
            " ".join(dict.fromkeys(INSTANCE_ID.findall(json.dumps(event)))),
        )
        self._dead_letter(spec, event, result, 0, ZERO_CONCURRENCY)

    def _retry(self, spec: FunctionSpec, event: Any, source: str, queued: _Queued) -> None:
        try:
            self._executor.submit(self._run, spec, event, source, queued)
        except RuntimeError:
            return  # the runner stopped while the event waited: it is dropped with the sandbox

    def _dead_letter(
        self, spec: FunctionSpec, event: Any, result: InvocationResult, invocations: int, condition: str
    ) -> None:
        """``invocations``: how many times the handler ran the event (none, when it was throttled throughout)."""
        status = "429" if result.throttled else "200"
        # An event Lambda never tried (reserved concurrency 0) has no answer: no error code, no response
        unanswered = condition == ZERO_CONCURRENCY
        message = ZERO_CONCURRENCY_MESSAGE if unanswered else (result.error_message or "")[:256]
        if spec.dead_letter_arn:
            self._send(
                spec,
                spec.dead_letter_arn,
                json.dumps(event),
                {
                    "RequestID": {"DataType": "String", "StringValue": result.request_id},
                    **({} if unanswered else {"ErrorCode": {"DataType": "Number", "StringValue": status}}),
                    "ErrorMessage": {"DataType": "String", "StringValue": message},
                },
            )
        if spec.on_failure_arn:
            record: dict[str, Any] = {
                "version": "1.0",
                "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "requestContext": {
                    "requestId": result.request_id,
                    "functionArn": f"{spec.arn}:$LATEST",
                    "condition": condition,
                    "approximateInvokeCount": invocations,
                },
                "requestPayload": event,
            }
            if not unanswered:
                record["responseContext"] = {
                    "statusCode": int(status),
                    "executedVersion": "$LATEST",
                    # a throttled event's last answer was Lambda's 429, not an error of the function
                    **({} if result.throttled else {"functionError": "Unhandled"}),
                }
                record["responsePayload"] = {
                    "errorMessage": result.error_message,
                    "errorType": result.error_type,
                }
            self._send(spec, spec.on_failure_arn, json.dumps(record), {})
        if not (spec.dead_letter_arn or spec.on_failure_arn):
            _log.warning(
                "%s: event dropped (%s) after %d invocations: %s",
                spec.logical_id,
                condition,
                invocations,
                result.error_message,
            )

    def _send(self, spec: FunctionSpec, queue_arn: str, body: str, attributes: dict[str, Any]) -> None:
        _, _, service, _region, account, name = queue_arn.split(":", 5)
        if service != "sqs":
            raise ValueError(f"the sandbox sends failed events to SQS only, not {queue_arn}")
        with self._sqs_lock:
            url = self._sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        # Lambda sends to a dead-letter queue or a destination with the function's execution role.
        self._sender(spec).send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
