"""A function's reserved concurrency, and the throttles Lambda answers beyond it.

`ReservedConcurrentExecutions` caps a function's executions in flight across all of its sources at once
(EventBridge rules, schedules and every SQS mapping); an SQS mapping's `MaximumConcurrency` only limits its
own pollers and reserves nothing. What Lambda does with an invocation beyond the cap (a 429), per source:

- asynchronous (rules, schedules): "For throttling errors (429) and system errors (500-series), Lambda returns
  the event to the queue and attempts to run the function again for up to 6 hours by default. The retry
  interval increases exponentially from 1 second after the first attempt to a maximum of 5 minutes"
  (https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html). A throttle is not a
  function error, so it is not one of `MaximumRetryAttempts`; an event older than `MaximumEventAgeInSeconds`
  goes to the on-failure destination / dead-letter queue, or is dropped (``async_invoke.py``). Not so for a
  function whose reserved concurrency is 0 (an operator's stop): since August 2021 "for functions with reserved
  concurrency set to zero, all events will be automatically sent to the configured DLQ or the on-failure event
  destination immediately, instead of being retried" (AWS's notice of the change; "if neither is configured,
  events are dropped immediately"), the on-failure record's condition ``ZeroReservedConcurrency``.
- an SQS mapping: "If the invocation fails due to throttling, Lambda gradually backs off retries [...].
  Lambda continues to retry the message until the message's timestamp exceeds your queue's visibility
  timeout, at which point Lambda drops the message"
  (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-errorhandling.html): the batch shows again in
  the queue and its next receive counts towards `maxReceiveCount`, which is why AWS advises a visibility
  timeout of six times the function's timeout, "The extra time allows Lambda to retry if your function is
  throttled while processing a previous batch"
  (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html); and "maximum concurrency and
  reserved concurrency are two independent settings"
  (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-scaling.html) (``sqs_source.py``).

The sandbox compresses Lambda's times by ``THROTTLE_TIME_SCALE``, as the runner's default retry delays compress
Lambda's one and two minutes into one and two seconds: back-off from 1/60 s to 5 s, a 6 h event age into 6 min.
An SQS message's visibility timeout is the queue's own, in real seconds (SQS keeps it, not Lambda).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping

from nodecycle_sandbox.runner.invokers import InvocationResult

THROTTLE_TIME_SCALE = 1 / 60
# Lambda's back-off for a throttled event: 1 s after the first throttle, doubling, at most 5 minutes.
_FIRST_BACKOFF_SECONDS = 1.0
_MAX_BACKOFF_SECONDS = 300.0
THROTTLE_ERROR = "TooManyRequestsException"


def throttle_backoff(throttles: int, scale: float) -> float:
    """How long Lambda waits before it tries a throttled invocation again, after its ``throttles``-th
    throttle, in the sandbox's compressed time."""
    return scale * min(_FIRST_BACKOFF_SECONDS * 2 ** (throttles - 1), _MAX_BACKOFF_SECONDS)


def throttled_result() -> InvocationResult:
    """The answer to an invocation beyond the function's reserved concurrency: nothing ran."""
    now = time.time()
    return InvocationResult(
        request_id=str(uuid.uuid4()),
        ok=False,
        started_at=now,
        finished_at=now,
        error_type=THROTTLE_ERROR,
        error_message="Rate Exceeded.",
        throttled=True,
    )


class ReservedConcurrency:
    """Executions in flight per function; a function with a reserved concurrency gets no more than that.

    A function without one is not limited here (the account's concurrency, which the sandbox does not model).
    ``live``: the function's reserved concurrency as Lambda has it now (an operator may have changed it, to 0 to
    stop the function: ``lambda_functions.py``), instead of the template's.
    """

    def __init__(
        self, reserved: Mapping[str, int | None], live: Callable[[str], int | None] | None = None
    ) -> None:
        self._reserved = dict(reserved)
        self._live = live
        self._in_flight: dict[str, int] = dict.fromkeys(self._reserved, 0)
        self._lock = threading.Lock()

    def limit(self, function: str) -> int | None:
        """The function's reserved concurrency now (None: none reserved)."""
        return self._live(function) if self._live is not None else self._reserved.get(function)

    def try_acquire(self, function: str) -> bool:
        """Take one of the function's executions; False (a throttle) when all of them are in flight."""
        limit = self.limit(function)
        with self._lock:
            if limit is not None and self._in_flight.get(function, 0) >= limit:
                return False
            self._in_flight[function] = self._in_flight.get(function, 0) + 1
            return True

    def release(self, function: str) -> None:
        with self._lock:
            self._in_flight[function] -= 1
