"""Asynchronous invocation (EventBridge rules and schedules -> Lambda), with Lambda's retry policy.

A failed event is retried `MaximumRetryAttempts` times (2 by default) after a back-off (about a minute, then
two, on AWS; seconds in the sandbox), then sent to the function's dead-letter queue or on-failure
destination if the template configures one, else dropped, as Lambda does. Faults (``runner/faults.py``) may
run an event late, or twice.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nodecycle_sandbox.runner.faults import INSTANCE_ID, EventFate, RunnerFaults
from nodecycle_sandbox.runner.functions import FunctionSpec
from nodecycle_sandbox.runner.invokers import InvocationResult
from nodecycle_sandbox.runner.journal import Invocation, Journal

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

_log = logging.getLogger(__name__)


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
    ) -> None:
        self._faults = faults or RunnerFaults()
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

    def _run(self, spec: FunctionSpec, event: Any, source: str) -> None:
        attempts = 1 + spec.async_retries
        result: InvocationResult | None = None
        for attempt in range(1, attempts + 1):
            if self._stopping.is_set():
                return
            result = self._invoke(spec, event)
            self._journal.record(Invocation.of(spec.logical_id, source, event, result, attempt=attempt))
            if result.ok:
                return
            if attempt < attempts:
                delay = self._retry_delays[min(attempt - 1, len(self._retry_delays) - 1)]
                if self._stopping.wait(delay):
                    return
        assert result is not None
        self._dead_letter(spec, event, result, attempts)

    def _dead_letter(self, spec: FunctionSpec, event: Any, result: InvocationResult, attempts: int) -> None:
        if spec.dead_letter_arn:
            self._send(
                spec,
                spec.dead_letter_arn,
                json.dumps(event),
                {
                    "RequestID": {"DataType": "String", "StringValue": result.request_id},
                    "ErrorCode": {"DataType": "Number", "StringValue": "200"},
                    "ErrorMessage": {"DataType": "String", "StringValue": (result.error_message or "")[:256]},
                },
            )
        if spec.on_failure_arn:
            record = {
                "version": "1.0",
                "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                "requestContext": {
                    "requestId": result.request_id,
                    "functionArn": f"{spec.arn}:$LATEST",
                    "condition": "RetriesExhausted",
                    "approximateInvokeCount": attempts,
                },
                "requestPayload": event,
                "responseContext": {
                    "statusCode": 200,
                    "executedVersion": "$LATEST",
                    "functionError": "Unhandled",
                },
                "responsePayload": {"errorMessage": result.error_message, "errorType": result.error_type},
            }
            self._send(spec, spec.on_failure_arn, json.dumps(record), {})
        if not (spec.dead_letter_arn or spec.on_failure_arn):
            _log.warning(
                "%s: event dropped after %d attempts: %s", spec.logical_id, attempts, result.error_message
            )

    def _send(self, spec: FunctionSpec, queue_arn: str, body: str, attributes: dict[str, Any]) -> None:
        _, _, service, _region, account, name = queue_arn.split(":", 5)
        if service != "sqs":
            raise ValueError(f"the sandbox sends failed events to SQS only, not {queue_arn}")
        with self._sqs_lock:
            url = self._sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=account)["QueueUrl"]
        # Lambda sends to a dead-letter queue or a destination with the function's execution role.
        self._sender(spec).send_message(QueueUrl=url, MessageBody=body, MessageAttributes=attributes)
