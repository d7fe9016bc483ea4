"""A lifecycle action's event that intake handed to the intake queue can also come again by Lambda: the send
landed and the invocation died before it answered (a timeout, a killed container), so Lambda retries the event as
well. Both deliveries make one lifecycle and one unit of work (invariant 6). And the queue's own retry of a handed
event is never handed again: it fails its record (SQS's receives, then the dead-letter queue), no loop."""

from __future__ import annotations

from types import ModuleType

from tests.functions.intake.test_eventbridge_retries_by_the_queue import HandedOver, handed_over, queued, sent
from tests.functions.intake.test_intake_function import records, work
from tests.functions.intake.test_retries_alone_in_a_batch import Answering, dynamodb
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

__all__ = ["dynamodb", "handed_over", "sent"]  # (the fixtures, imported to be used here)


def test_an_event_handed_over_and_retried_by_lambda_as_well_makes_one_lifecycle(
    dynamodb: Answering, intake_fn: ModuleType, stack: Stack, handed_over: HandedOver
) -> None:
    # Given a terminate action's event from EventBridge that intake handed to the queue (DynamoDB throttled)
    dynamodb.answer = None

    # When Lambda retries the same event as well (its invocation died after the send), the throttle over
    assert intake_fn.handler(handed_over.event, LambdaContext()) is None
    # and the queue delivers the copy handed to it, later
    response = intake_fn.handler(sqs_event(handed_over.body), LambdaContext())

    # Then one lifecycle, one unit of work, and nothing handed over a second time
    assert response == {"batchItemFailures": []}
    (record,) = records()
    assert work(stack.drain_queue) == [{"record_id": record["id"], "seq": 0, "step": "acquire-slot"}]
    assert len(handed_over.sent) == 1


def test_a_handed_event_that_fails_again_on_the_queue_is_not_handed_again(
    intake_fn: ModuleType, stack: Stack, handed_over: HandedOver
) -> None:
    # Given an event handed to the queue, and DynamoDB still throttled at its delivery there (the fixture's)
    # When the queue delivers it (its first receive), Then its record fails (SQS delivers it again, then
    # dead-letters it) and no second copy is sent: the copy handed over is the only one on the queue
    response = intake_fn.handler(sqs_event(handed_over.body), LambdaContext())
    assert response == {"batchItemFailures": [{"itemIdentifier": "message-0"}]}
    assert len(handed_over.sent) == 1
    assert queued(stack) == 1
