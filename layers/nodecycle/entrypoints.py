"""Lambda glue shared by the function handlers: work-message handling.

Handlers stay thin: parse the event, call the domain through these helpers, map the outcome. Log keys of
one record (instance id, lifecycle token as the correlation id) come from the powertools Logger's
``append_context_keys``, which removes them when the record is done, so the next record starts clean; keys
whose value is None are left out of the log lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from nodecycle.domain.errors import AccessRefused, TransientError, retry_after_wait
from nodecycle.domain.intake_budget import OutOfTime
from nodecycle.domain.model import parse_record_id
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.domain.ports.runtime import Metrics
from nodecycle.observability import logger, metrics, tracer
from nodecycle.settings import SettingsError

if TYPE_CHECKING:  # (the work functions' wiring imports the engine: the intake function never runs one)
    from nodecycle.domain.engine import Handled, StepEngine

SqsRecord = dict[str, Any]  # one record of Lambda's SQS event: messageId, body, attributes...
BatchResponse = dict[str, list[dict[str, str]]]  # {"batchItemFailures": [{"itemIdentifier": id}, ...]}
WorkHandler = Callable[[dict[str, Any], LambdaContext], BatchResponse]


class BatchFailed(Exception):
    """Every record of an SQS batch failed, one of them unexpectedly: the invocation fails, and SQS delivers the
    batch again."""


def expected_retry(error: BaseException) -> bool:
    """Whether a record's failure is an ordinary retry: a call that may succeed later (throttled, a 5xx, out of
    the invocation's time), a read that must come again (a hook read before its action started), a claim another
    invocation holds. Not a role refused a call (:class:`AccessRefused`: it does not pass by itself, an operator
    must see it) nor anything else (a bug, an error AWS would give again)."""
    return isinstance(error, TransientError) and not isinstance(error, AccessRefused)


# How long a record retried on purpose waits before its first retry when its queue shortens it (``Redeliveries``),
# doubled at each receive of a record that makes progress; never longer than the queue's visibility timeout.
FIRST_RETRY_SECONDS = 10


class Redeliveries(Protocol):
    """The queue a batch came from, as its records' retries need it: its visibility timeout, and a record's
    visibility shortened (SQS's ChangeMessageVisibility by the record's receipt handle)."""

    @property
    def visibility_timeout(self) -> int: ...

    def redeliver_in(self, receipt_handle: str, seconds: int) -> None: ...


def retried_again(
    error: BaseException,
    record: SqsRecord,
    redeliveries: Redeliveries | None = None,
    received_at: float | None = None,
) -> bool:
    """Whether a record retried on purpose failed so again at its redelivery (its second receive or later): no
    ordinary retry. Each of them is answered by then (the hook and the owner's listing are read again past their
    ttl, another invocation's claim is released, a throttle has passed): one that lasts (a throttle that never
    ends, a service down) would otherwise page nobody until the dead-letter queue's alarm, 5 receives on (15
    minutes on the intake queue), after the hooks' actions it held back had expired. Not progress: an AWS Health
    event taken in over several invocations (:class:`OutOfTime`: each takes in more).

    On a queue whose first retries come sooner (``redeliveries``), the redelivery that answers them is the one a
    visibility timeout after the first receive, as before: a retry that comes sooner (10 s on) may find the
    throttle still there, an ordinary retry again. Told by SQS's ``ApproximateFirstReceiveTimestamp``: a receive
    five sixths of the queue's timeout or more since the first came after a full timeout (the sixth below it for
    an approximate timestamp). A sooner retry comes within two thirds of it (``retry_in`` shortens no other): it
    is counted from the record's failure, not from its receive (a record that failed 20 s into its invocation with
    a Retry-After of 60 s comes back 80 s after its first receive); the sixth between is Lambda's poller taking a
    visible message late. Measured at this receive (``received_at``, the batch's start; default now), not at the
    record's failure: a receive's own seconds before it failed are no later redelivery."""
    if isinstance(error, OutOfTime):
        return False
    if _receives(record) < 2:
        return False
    if redeliveries is None:
        return True
    since = _since_first_receive(record, received_at)
    return since is None or since >= redeliveries.visibility_timeout * 5 / 6


def _first_receive(record: SqsRecord) -> datetime | None:
    """When SQS first handed the record's message to a consumer, on SQS's clock; None: SQS did not say."""
    attributes = record.get("attributes") or {}
    try:
        return datetime.fromtimestamp(int(attributes["ApproximateFirstReceiveTimestamp"]) / 1000, UTC)
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        return None


def _since_first_receive(record: SqsRecord, at: float | None = None) -> float | None:
    """Seconds from SQS's first hand-over of the record's message to a consumer until ``at`` (default now);
    None: SQS did not say."""
    first = _first_receive(record)
    if first is None:
        return None
    return max((now() if at is None else at) - first.timestamp(), 0.0)


def now() -> float:
    """The wall clock SQS's timestamps are on (seconds since the epoch)."""
    return time.time()


def _receives(record: SqsRecord) -> int:
    attributes = record.get("attributes") or {}
    try:
        return int(attributes.get("ApproximateReceiveCount", 1))
    except (TypeError, ValueError):
        return 1


def retry_wait(error: BaseException, backoff: int = FIRST_RETRY_SECONDS) -> int:
    """Whole seconds a retry on purpose waits: ``backoff``, or as long as its error says it must (a server's
    Retry-After, up to its cap; an answer read again only so late), whichever is longer."""
    retry_after = error.retry_after if isinstance(error, TransientError) else None
    return max(backoff, int(retry_after_wait(retry_after) + 0.999))


def retry_in(error: BaseException, record: SqsRecord, timeout: int) -> int | None:
    """How soon a record retried on purpose comes back (seconds), when sooner than the queue's ``timeout``; None:
    at the timeout, as SQS brings it back unasked. At its first receive: FIRST_RETRY_SECONDS, or as long as its
    error says it must wait (a server's Retry-After, up to its cap; an answer read again only so late). At every
    receive of a record that makes progress (:class:`OutOfTime`), doubling from FIRST_RETRY_SECONDS. Not at the
    later receives of the others: each receive counts towards the dead-letter queue (5 on the intake queue), and
    retries that all came sooner would dead-letter a throttle of five minutes that the queue's own timeout rides
    out; one sooner retry moves the dead-letter queue from 15 to 12 minutes. Nor when it would come back past
    two thirds of the ``timeout`` since its first receive (it failed late in its invocation, or must wait long):
    ``retried_again`` would no longer tell its next receive from a redelivery at the timeout, and would page."""
    receives = _receives(record)
    progress = isinstance(error, OutOfTime)
    if receives > 1 and not progress:
        return None
    seconds = retry_wait(error, FIRST_RETRY_SECONDS * 2 ** min(max(receives - 1, 0), 12))
    if not progress and (_since_first_receive(record) or 0.0) + seconds > timeout * 2 / 3:
        return None
    return seconds if seconds < timeout else None


def _redeliver_sooner(redeliveries: Redeliveries, record: SqsRecord, error: BaseException) -> None:
    """Best effort: a record whose visibility cannot be changed (its handle expired, the message received again
    by another invocation or no longer in flight, the call refused or throttled) comes back at the queue's
    timeout, as without it; its failure is reported all the same."""
    seconds = retry_in(error, record, redeliveries.visibility_timeout)
    handle = record.get("receiptHandle")
    if seconds is None or not handle:
        return
    try:
        redeliveries.redeliver_in(handle, seconds)
    except Exception as failure:  # (whatever it is: the record's retry must not fail for it)
        logger.warning(
            "a record retried comes back after the queue's visibility timeout, not in %d s: %s",
            seconds,
            failure,
            extra={"message_id": record.get("messageId")},
        )


def partial_batch(
    event: dict[str, Any], handle: Callable[[SqsRecord], object], redeliveries: Redeliveries | None = None
) -> BatchResponse:
    """Handle each record of an SQS event alone and report those that raised (``ReportBatchItemFailures``):
    SQS deletes the others and delivers these again, then dead-letters them (the dead-letter queue's alarm).

    An expected retry (``expected_retry``) is reported alone and logged as a warning, whatever the other
    records did: a lone record retried on purpose must not fail the invocation, whose error alarm would page an
    operator for it. Retried so again at its redelivery (``retried_again``), it is unexpected: that retry lasts.
    When every record failed and one of them unexpectedly, the invocation fails instead, as it
    would have without partial responses, so that Lambda's error metrics (and the function's error alarm) show
    it; an unexpected failure beside records that succeeded is reported alone (failing the invocation would
    deliver those again, each receive counted towards the dead-letter queue), logged as an error with its
    traceback, and seen at its next receives or in the dead-letter queue.

    With ``redeliveries`` (the queue the batch came from), an expected retry comes back sooner than the queue's
    visibility timeout (``retry_in``: 10 s at its first receive rather than the intake queue's 180 s, a lifecycle
    action's heartbeat timeout running meanwhile); a record that succeeds costs no call for it.

    Powertools' batch utility does this too, but importing it costs each cold start about 0.4x an
    ``import boto3`` (asyncio and every event data class): measured by ``make bench``."""
    records = event.get("Records") or []
    received_at = now()  # (the batch's receive, give or take Lambda's hand-over: see retried_again)
    failed: list[dict[str, str]] = []
    unexpected: Exception | None = None
    for record in records:
        try:
            handle(record)
        except SettingsError:
            # The function's settings, read at its first record (deferred from the cold start), not this record's
            # fault: every record would fail the same way. The invocation fails with the error that names the
            # setting (Lambda's error, not "all records failed"), and SQS delivers the batch again.
            raise
        except Exception as error:  # one record's failure must not fail the others: reported, retried
            failed.append({"itemIdentifier": record["messageId"]})
            if expected_retry(error) and not retried_again(error, record, redeliveries, received_at):
                logger.warning(
                    "a record of the batch is retried: SQS delivers it again: %s",
                    error,
                    extra={"message_id": record.get("messageId")},
                )
                if redeliveries is not None:
                    _redeliver_sooner(redeliveries, record, error)
                continue
            logger.exception(
                "a record of the batch failed%s: SQS delivers it again",
                " again at its redelivery" if expected_retry(error) else "",
                extra={"message_id": record.get("messageId")},
            )
            unexpected = unexpected or error
    if unexpected is not None and len(failed) == len(records):
        raise BatchFailed(f"all {len(records)} records of the batch failed") from unexpected
    return {"batchItemFailures": failed}


def run_work_record(engine: StepEngine, metrics: Metrics, record: SqsRecord, context: Any) -> Handled | None:
    """One SQS record of a work queue: one step (or a few inline) of one lifecycle.

    A body that is not a work message, or one naming no lifecycle, can never succeed: it is logged and
    dropped, not retried. Anything
    raised from the engine fails this record only, so SQS redelivers it and, in the end, dead-letters it.
    """
    try:
        message = WorkMessage.model_validate_json(record["body"])
    except ValidationError as error:
        logger.error(
            "dropped a work message that is not valid: %s",
            error.errors()[0]["msg"],
            extra={"body": record["body"][:500], "message_id": record.get("messageId")},
        )
        metrics.count("WorkMessagesRejected")
        return None
    delivered_at = _first_receive(record)
    if delivered_at is not None:
        message = message.model_copy(update={"delivered_at": delivered_at})
    try:
        parse_record_id(message.record_id)
    except ValueError as error:
        # Not sent by nodecycle (anyone allowed to send to the queue can): no lifecycle has such an id, and the
        # table would answer it with another item (an action's claim, an event's intake progress) that no
        # record reads from, or refuse the key (empty, too long): an error at every retry until the
        # dead-letter queue, which a redrive would only fill again
        logger.error(
            "dropped a work message that names no lifecycle: %s",
            error,
            extra={"message_id": record.get("messageId")},
        )
        metrics.count("WorkMessagesRejected")
        return None
    handled = engine.handle(
        message, time_left=lambda: context.get_remaining_time_in_millis() / 1000, scope=lifecycle_keys
    )
    logger.debug(
        "work message handled: %s",
        handled,
        extra={"record_id": message.record_id, "seq": message.seq, "step": message.step},
    )
    return handled


def lifecycle_keys(record_id: str) -> AbstractContextManager[None]:
    """The keys of one lifecycle's log lines (instance id, lifecycle token as the correlation id), removed
    when its run is over: an invocation may run a second lifecycle after the first (a waiter handed the slot
    the first freed), whose lines must not carry the first one's keys."""
    instance_id, _, token = parse_record_id(record_id)
    return logger.append_context_keys(
        record_id=record_id, instance_id=instance_id, lifecycle_token=token, correlation_id=token
    )


def work_queue_handler(
    engine: Callable[[], StepEngine],
    sink: Callable[[], Metrics],
    redeliveries: Callable[[], Redeliveries | None] = lambda: None,
) -> WorkHandler:
    """The Lambda handler of a work queue: each SQS record is one work message, run by ``engine``; a record
    that raises fails alone (partial batch response), so SQS retries it, then dead-letters it (sooner than the
    queue's visibility timeout when the function gives its queue as ``redeliveries``: ``partial_batch``)."""

    @logger.inject_lambda_context(clear_state=True)
    @tracer.capture_lambda_handler
    @metrics.log_metrics
    def handler(event: dict[str, Any], context: LambdaContext) -> BatchResponse:
        return partial_batch(
            event, lambda record: run_work_record(engine(), sink(), record, context), redeliveries()
        )

    return handler
