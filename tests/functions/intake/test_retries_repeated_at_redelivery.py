"""A record retried on purpose that fails so again at its redelivery is no ordinary retry: every one of intake's
(a hook or the owner's listing read before the action started, a claim another invocation held, a throttle)
is answered by then (the intake queue's 180 s visibility timeout is past the caches' ttl and LIST_EVERY). A
throttle or an outage that lasts would otherwise page nobody until the dead-letter queue's alarm, 5 receives
(15 minutes) on, after the hooks' actions it held back had expired (360 s at the shortest: a node terminated
undrained). Failed so, it is an unexpected failure: the function's error alarm sees it. Progress (an AWS
Health event taken in over several invocations, OutOfTime) is not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.entrypoints import BatchFailed
from tests.functions.intake.test_disruption_intake import health_event_of, many_scheduled
from tests.functions.intake.test_refused_writes import hook_notifications
from tests.functions.intake.test_retries_alone_in_a_batch import THROTTLED, Answering, dynamodb
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack

__all__ = ["dynamodb"]  # (the fixture, imported to be used here)


def received(batch: dict[str, Any], times: int) -> dict[str, Any]:
    """The batch as SQS delivers it at its ``times``-th receive."""
    for record in batch["Records"]:
        record["attributes"] = {**record["attributes"], "ApproximateReceiveCount": str(times)}
    return batch


def test_an_intake_record_retried_again_at_its_redelivery_fails_the_invocation(
    dynamodb: Answering, intake_fn: ModuleType
) -> None:
    # Given a hook notification alone in its batch, and DynamoDB throttling its record's write for good
    dynamodb.answer = THROTTLED

    # When intake takes it in at its first receive, Then it is retried (an ordinary retry: no error)
    first = intake_fn.handler(received(sqs_event(hook_notifications()[0]), 1), LambdaContext())
    assert first == {"batchItemFailures": [{"itemIdentifier": "message-0"}]}

    # And when the throttle is still there at its redelivery, the invocation fails (the function's error alarm),
    # 3 minutes on, not 15 (before: a batch item failure again, until the dead-letter queue)
    with pytest.raises(BatchFailed) as failed:
        intake_fn.handler(received(sqs_event(hook_notifications()[0]), 2), LambdaContext())
    assert "Rate exceeded" in str(failed.value.__cause__)


def test_a_health_event_taken_in_over_several_receives_is_progress_not_a_failure(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given an AWS Health event naming two instances, at its third receive (taken in bit by bit)
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    batch = received(sqs_event(health_event_of(many_scheduled(2, starts), starts)), 3)

    # When intake reaches it with too little time left, Then it goes back to the queue, the invocation ok
    response = intake_fn.handler(batch, LambdaContext(remaining_millis=2_000))
    assert response == {"batchItemFailures": [{"itemIdentifier": "message-0"}]}


@pytest.mark.parametrize("function", ["drain", "eip"])
def test_a_work_record_retried_again_at_its_redelivery_fails_the_invocation(
    dynamodb: Answering, function: str
) -> None:
    # Given a work message whose record's read DynamoDB throttles for good, at its second receive
    handler = load_function(function).handler
    body = WorkMessage(record_id="i-0aaaaaaaaaaaaaaa1/terminate/token", seq=0, step=Step.COMPLETE)
    dynamodb.answer = THROTTLED

    # When the function takes it, Then the invocation fails (before: a batch item failure again)
    with pytest.raises(BatchFailed):
        handler(received(sqs_event(body.model_dump_json()), 2), LambdaContext())
