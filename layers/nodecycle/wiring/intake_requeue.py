"""An event from EventBridge retried on purpose, handed to the intake queue: the intake function's, kept out of
its handler (thin) and out of ``wiring.intake``, which the sweeper imports too (it would pay this module's
imports, the disruption contracts and the entry points, at each cold start)."""

from __future__ import annotations

import json
from typing import Any

from nodecycle.contracts.disruption_events import is_disruption_event
from nodecycle.entrypoints import expected_retry, retry_wait
from nodecycle.observability import logger
from nodecycle.wiring.intake import intake_queue


def requeue_delay(error: BaseException) -> int:
    """How long an event from EventBridge handed to the intake queue waits there: as a record of the queue retried
    on purpose waits at its first receive (nodecycle/entrypoints.py's ``retry_in``): FIRST_RETRY_SECONDS, or as
    long as its error says its retry must wait (a hook read before its action started, read again once its ttl
    is past; the listing of this owner's groups, read again at most every 30 s: domain/catalog.py; a server's
    Retry-After, capped). Not a fixed minute: a throttle holds no cached answer back, and a minute is past the
    30 s heartbeat timeout Auto Scaling allows a hook (its action lapsed unless the sweeper came first)."""
    return retry_wait(error)


def handed_to_the_queue(event: dict[str, Any], error: Exception) -> bool:
    """Whether the lifecycle action's event that ``error`` stopped was handed to the intake queue, its retry.

    EventBridge invokes intake asynchronously: Lambda retries only a failed invocation (twice, then the on-failure
    destination), so an ordinary retry failed it, and IntakeErrorsAlarm paged for each (a throttle, a hook read
    before its action started). On the queue the event is retried and dead-lettered as the queue's own records
    (5 receives, the dead-letter alarm), and one that fails so again at its redelivery is the function's error
    (``entrypoints.retried_again``). Not handed: what is no ordinary retry (a refusal, a bug: the function's
    error alarm must see it); a disruption (the queue is trusted less than EventBridge: what EC2 does not
    confirm, a rebalance recommendation, a Spot warning its request does not show yet, would be dropped there);
    and an event the queue refuses (it fails the invocation, as before: Lambda retries it, nothing lost)."""
    if not expected_retry(error) or is_disruption_event(event):
        return False
    queue = intake_queue()
    if queue is None:
        return False
    delay = requeue_delay(error)
    try:
        queue.send(json.dumps(event), delay_seconds=delay)
    except Exception:
        logger.exception(
            "could not hand an event to the intake queue: the invocation fails, Lambda retries it"
        )
        return False
    logger.warning(
        "an event from EventBridge is retried by the intake queue in %d s: %s",
        delay,
        error,
        extra={"event_id": event.get("id")},
    )
    return True
