"""boto3 plumbing shared by the AWS adapters: clients made on first use, their configuration, and error
classification."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectionError,
    HTTPClientError,
    ReadTimeoutError,
)

from nodecycle.domain.errors import AccessRefused, TransientError

# botocore's standard retry mode already backs off on throttling and 5xx; what still fails after it is
# handed to the step engine as a TransientError, which retries the step later instead of sleeping here.
# Within an invocation each attempt is also cut to the time left (see calls_within): the read timeout per
# attempt, never the connect timeout, which botocore takes from the client alone; so it is short (an AWS
# endpoint in the region connects in milliseconds, and a connection that takes seconds is one to try again).
MAX_ATTEMPTS = 5
CONNECT_TIMEOUT = 2.0
READ_TIMEOUT = 20.0
CLIENT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": MAX_ATTEMPTS},
    connect_timeout=CONNECT_TIMEOUT,
    read_timeout=READ_TIMEOUT,
)
# An attempt is not started with less than its connect timeout and this for the answer left (see calls_within)
MIN_READ_SECONDS = 1.0
# The longest backoff of botocore's standard mode before a retry (a throttled call: rand x 2^(attempt - 1) s,
# truncated at 20 s; botocore's opt-in AWS_NEW_RETRIES_2026 may add an x-amz-retry-after, which nodecycle does not set)
MAX_BACKOFF_SECONDS = 20.0

TimeLeft = Callable[[], float | None]  # seconds the calls made now may still take; None: no end


class CallOutOfTime(TransientError):
    """An AWS call (or its retry) not made: the run that would make it has too little time left for one attempt
    and the backoff botocore may sleep after it. Not AWS's failure: the next run (a step's retry, the next
    sweep, the event's redelivery) makes it."""


_time_left: ContextVar[TimeLeft | None] = ContextVar("aws_calls_time_left", default=None)


@contextmanager
def calls_within(time_left: TimeLeft) -> Iterator[None]:
    """Every AWS call made in this block by a client of :func:`client` ends within ``time_left()`` seconds.

    A Lambda killed at its timeout in the middle of a call commits nothing after it: a step's retry, its next
    message, a sweep's log of what it left undone. Against an endpoint that takes the connection and never
    answers, one call of CLIENT_CONFIG waits up to five read timeouts (100 s) and the backoffs between them,
    longer than any nodecycle function's timeout. So each attempt, when botocore is about to send it, gets a read
    timeout cut to what is left less its connect timeout and the longest backoff botocore may sleep after it
    (none after the last attempt), and an attempt that would not get ``MIN_READ_SECONDS`` is not sent: the call
    raises :class:`CallOutOfTime`, a TransientError, so a step's calls are retried as for a throttled one. The
    innermost block holds (a step's own time inside its invocation's)."""
    token = _time_left.set(time_left)
    try:
        yield
    finally:
        _time_left.reset(token)


# How each service says it refused a call for the caller's rate (botocore's standard mode retries them): an
# attempt so answered never reached what it names, whatever its HTTP status (EC2's RequestLimitExceeded is a 503)
_THROTTLED_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "EC2ThrottledException",
        "BandwidthLimitExceeded",
        "LimitExceededException",
    }
)

# How a service says it refused a call for another update of the same resource still pending: Auto Scaling's
# ResourceContention ("You already have a pending update to an Auto Scaling resource"), which the API reference lists
# for CompleteLifecycleAction and RecordLifecycleActionHeartbeat. A 500, but a Sender fault in the service model: the
# attempt did nothing, as a throttled one (the other update goes on), and botocore retries it as any 5xx
_CONTENDED_CODES = frozenset({"ResourceContention"})
# An attempt so answered did not do what it asks (see _note_lost_answer)
_UNDONE_CODES = _THROTTLED_CODES | _CONTENDED_CODES

_TRANSIENT_CODES = _UNDONE_CODES | frozenset(
    {
        "InternalError",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "Unavailable",
        "InternalServerError",
        # the other codes botocore's standard retry mode retries: what still fails after it is as transient
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "TransactionInProgressException",
        # DynamoDB: a PutItem or UpdateItem on an item another writer's transaction holds at that moment (a
        # record written with its claim); botocore does not retry it, a later try meets the item free
        "TransactionConflictException",
    }
)

# How each service says that the caller's role may not make the call (an identity policy, a service control
# policy, a permissions boundary): EC2 UnauthorizedOperation, DynamoDB and the JSON services
# AccessDeniedException, the query services (Auto Scaling, SQS, STS) AccessDenied
_ACCESS_REFUSED_CODES = frozenset({"AccessDenied", "AccessDeniedException", "UnauthorizedOperation"})


def client(service: str) -> Any:
    """A boto3 client with nodecycle's retry and timeout configuration.

    The endpoint, region and credentials come from the environment as boto3 reads them (including
    ``AWS_ENDPOINT_URL``), so the same code talks to AWS and to a local emulator.
    """
    made = boto3.client(service, config=CLIENT_CONFIG)  # type: ignore[call-overload]
    # every service's every attempt, retries included (botocore emits before-send.<service>.<operation>)
    made.meta.events.register("before-send", _attempt_within_time, unique_id="nodecycle-calls-within-time")
    if service == "dynamodb":
        # (a more specific event than botocore's own needs-retry.dynamodb handler: asked first, its answer wins)
        made.meta.events.register(
            "needs-retry.dynamodb.TransactWriteItems",
            _retry_throttled_transaction,
            unique_id="nodecycle-retry-throttled-transaction",
        )
    return made


# The reasons DynamoDB gives an item of a transaction it cancelled for throughput (the API reference's
# CancellationReasons): the table's or an index's capacity, or the request rate on the item.
_THROUGHPUT_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded"})


def _retry_throttled_transaction(response: Any = None, attempts: int = 1, **_: Any) -> float | None:
    """(botocore's needs-retry, after each attempt of a DynamoDB TransactWriteItems) Retry a transaction that
    DynamoDB cancelled for throughput, as botocore's standard mode retries any other throttled call: up to
    MAX_ATTEMPTS, after a random sleep of up to 2^(attempt - 1) s (its own backoff, capped at MAX_BACKOFF_SECONDS).

    DynamoDB refuses a throttled PutItem with ProvisionedThroughputExceededException, which botocore retries; a
    throttled transaction it cancels, TransactionCanceledException naming ThrottlingError for the item throttled
    and None for the others, a code botocore retries never. Its one throttled attempt then failed the whole call:
    intake's event waited 10 s in the intake queue (the lifecycle out of the budget meanwhile), a drain's step the
    engine's backoff, where another throttled call costs well under a second. Nothing of a cancelled transaction is
    written, so the same one is sent again. A transaction cancelled for anything else (its condition, another
    writer's transaction on an item) is the caller's to judge, as before. Each retry is still sent only within the
    run's time (``calls_within``, on before-send). Unlike botocore's own retries, these take nothing from its retry
    quota (a private object of the client's retry handler): bounded by MAX_ATTEMPTS and the run's time instead."""
    if response is None or attempts >= MAX_ATTEMPTS:
        return None
    parsed = response[1] or {}
    if parsed.get("Error", {}).get("Code") != "TransactionCanceledException":
        return None
    reasons = {str(reason.get("Code")) for reason in parsed.get("CancellationReasons") or []} - {"None"}
    if not reasons or not reasons <= _THROUGHPUT_REASONS:
        return None
    return random.random() * min(2.0 ** (attempts - 1), MAX_BACKOFF_SECONDS)


def _backoff_after(attempt: int) -> float:
    """The longest sleep botocore's standard mode may take after attempt ``attempt`` fails (1-based)."""
    if attempt >= MAX_ATTEMPTS:
        return 0.0
    return min(2.0 ** (attempt - 1), MAX_BACKOFF_SECONDS)


def _attempt_within_time(request: Any, **_: Any) -> None:
    """(see calls_within) Raised here, CallOutOfTime is the call's outcome: botocore's retry handlers retry
    only its own connection and HTTP errors."""
    time_left = _time_left.get()
    left = None if time_left is None else time_left()
    if left is None:
        return
    context = request.context
    attempt = int(context.get("retries", {}).get("attempt", 1))
    read = left - CONNECT_TIMEOUT - _backoff_after(attempt)
    if read < MIN_READ_SECONDS:
        raise CallOutOfTime(
            f"{request.method} {request.url.split('?')[0]}: attempt {attempt} not sent, "
            f"{max(0.0, left):.1f} s left of the run's time"
        )
    # botocore 1.43 reads a request's own read timeout from its context (httpsession._get_request_timeout)
    context["read_timeout"] = min(READ_TIMEOUT, read)


class LazyClient[C]:
    """The boto3 client of one service, made on first use: building an adapter (at a cold start, or in a
    test) touches neither the network nor the credentials. A client given up front (a moto or Stubber
    client in tests) is used as it is. Declare it typed:
    ``self._ec2: LazyClient[EC2Client] = LazyClient("ec2", given)``."""

    def __init__(
        self, service: str, given: C | None = None, *, telling_lost_answers: tuple[str, ...] = ()
    ) -> None:
        self._service = service
        self._client = given
        self._telling = telling_lost_answers  # operations whose answers say when one was lost (answer_lost)

    def __call__(self) -> C:
        if self._client is None:
            self._client = client(self._service)
        if self._telling:
            tell_lost_answers(self._client, self._telling)
            self._telling = ()
        return self._client


# Set in a call's botocore context, and copied into its answer's ResponseMetadata, when an attempt before the last
# may have been taken by the service though its answer was lost (see tell_lost_answers).
_ANSWER_LOST = "NodecycleAnswerLost"


def tell_lost_answers(made: Any, operations: tuple[str, ...]) -> None:
    """Have the client ``made``'s ``operations`` say in their answers (a ClientError's response too) when an
    attempt before the last may have been taken though its answer was lost: its answer a 5xx other than a
    throttle, or lost on the way back (the connection closed, or the read timed out, after the request was sent).
    ``RetryAttempts`` alone cannot tell: a throttled attempt never reached what it names, and a retry after it
    that finds it ended means someone else ended it. (botocore keeps one handler per unique id: registering
    twice is harmless.)"""
    events = made.meta.events
    service = made.meta.service_model.service_id.hyphenize()
    for operation in operations:
        event = f"{service}.{operation}"
        events.register(f"needs-retry.{event}", _note_lost_answer, unique_id=f"nodecycle-lost-answer-{event}")
        events.register(f"after-call.{event}", _tell_lost_answer, unique_id=f"nodecycle-tell-lost-{event}")


def answer_lost(error: BaseException | None) -> bool:
    """Whether ``error``, an answer to an operation set up by :func:`tell_lost_answers`, came after an attempt of
    the same call whose answer was lost (and which may have done what the call asks)."""
    return isinstance(error, ClientError) and bool(
        error.response.get("ResponseMetadata", {}).get(_ANSWER_LOST)
    )


def _note_lost_answer(
    request_dict: Any, response: Any = None, caught_exception: Exception | None = None, **_: Any
) -> None:
    """(botocore's needs-retry, after every attempt) Note an attempt the service may have taken: not one it refused
    undone (throttled, or refused for another update pending: ``_UNDONE_CODES``), whatever its status. A retry after
    such a refusal that finds the action settled, or the address gone, met another caller's doing: the update its
    attempt contended with (an operator's completion of the same action, say), not this call's."""
    if response is not None:
        http, parsed = response
        code = str((parsed or {}).get("Error", {}).get("Code", ""))
        lost = http is not None and http.status_code >= 500 and code not in _UNDONE_CODES
    else:
        lost = isinstance(caught_exception, ReadTimeoutError | ConnectionClosedError)
    if lost:
        request_dict["context"][_ANSWER_LOST] = True


def _tell_lost_answer(parsed: Any, context: Any, **_: Any) -> None:
    """(botocore's after-call) Copy the note into the answer, which a ClientError carries as its response."""
    if context.get(_ANSWER_LOST):
        parsed.setdefault("ResponseMetadata", {})[_ANSWER_LOST] = True


def answered_at(answer: Any) -> datetime | None:
    """The service's time of ``answer`` (a boto3 call's result), as its Date header tells it: to the second, stamped
    before the answer went out, on the service's clock. None when not told (no Date, or one unreadable or without
    its zone)."""
    headers = (answer or {}).get("ResponseMetadata", {}).get("HTTPHeaders", {})
    try:
        date = parsedate_to_datetime(str(headers.get("date")))
    except (TypeError, ValueError):
        return None
    return date if date.tzinfo is not None else None


def error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def is_transient(error: Exception) -> bool:
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return error_code(error) in _TRANSIENT_CODES or status >= 500
    return isinstance(error, ConnectionError | HTTPClientError)


def is_access_refused(error: ClientError) -> bool:
    return error_code(error) in _ACCESS_REFUSED_CODES


@contextmanager
def transient_errors(what: str) -> Iterator[None]:
    """Re-raise what is worth retrying later as the domain's TransientError, and a call the role is refused as
    its :class:`AccessRefused` naming ``what`` and the code (never a ClientError a caller could take for an
    answer, such as "no active lifecycle action"); the rest as it is."""
    try:
        yield
    except (ClientError, ConnectionError, HTTPClientError) as error:
        if is_transient(error):
            raise TransientError(f"{what}: {error}") from error
        if isinstance(error, ClientError) and is_access_refused(error):
            message = str(error.response.get("Error", {}).get("Message", ""))
            raise AccessRefused(what, error_code(error), message) from error
        raise
