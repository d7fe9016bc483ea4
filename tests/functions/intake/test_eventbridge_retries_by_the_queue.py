"""A lifecycle action's event that EventBridge invoked intake with, retried on purpose (a TransientError: DynamoDB
throttled, a hook read before its action started), is handed to the intake queue, delayed: SQS delivers it again
and dead-letters it as it does the queue's own records, and the invocation succeeds. Failing it instead (Lambda's
asynchronous retries) counted each ordinary retry as the function's error, and IntakeErrorsAlarm paged for it.
What is not an ordinary retry (a refusal, a bug), a disruption (the queue trusts what EC2 cannot confirm less than
EventBridge: a rebalance recommendation by the queue is dropped), and an event the queue refuses still fail the
invocation, as before."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.entrypoints import FIRST_RETRY_SECONDS
from tests.functions.intake.test_disruption_intake import ec2_event, launch
from tests.functions.intake.test_intake_function import records, work
from tests.functions.intake.test_retries_alone_in_a_batch import REFUSED, THROTTLED, Answering, dynamodb
from tests.support.events import happening_now, load_event, sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

__all__ = ["dynamodb"]  # (the fixture, imported to be used here)


@pytest.fixture
def sent(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """The SendMessage calls to the intake queue (moto keeps no DelaySeconds), with the function told its URL
    (template.yaml's IntakeFunction environment)."""
    monkeypatch.setenv("NODECYCLE_INTAKE_QUEUE_URL", stack.intake_queue)
    calls: list[dict[str, Any]] = []

    def note(params: dict[str, Any], **_: Any) -> None:
        if params.get("QueueUrl") == stack.intake_queue:
            calls.append(dict(params))

    events = boto3._get_default_session().events
    events.register("provide-client-params.sqs.SendMessage", note, unique_id="tests.sent")
    yield calls
    events.unregister("provide-client-params.sqs.SendMessage", unique_id="tests.sent")


@dataclass(frozen=True)
class HandedOver:
    """A lifecycle action's event from EventBridge that intake handed to the intake queue, and the calls that
    sent it there."""

    event: dict[str, Any]
    sent: list[dict[str, Any]]

    @property
    def body(self) -> str:
        """The copy on the queue, as the queue delivers it."""
        return str(self.sent[0]["MessageBody"])


@pytest.fixture
def handed_over(dynamodb: Answering, intake_fn: ModuleType, sent: list[dict[str, Any]]) -> HandedOver:
    """A terminate action's event from EventBridge whose record's write DynamoDB throttled (and still throttles:
    ``dynamodb.answer = None`` ends it): intake's invocation succeeded (before: TransientError, Lambda's error)
    and handed the event to the intake queue, once."""
    event = happening_now(load_event("eventbridge-terminate.json"))
    dynamodb.answer = THROTTLED
    assert intake_fn.handler(event, LambdaContext()) is None
    assert len(sent) == 1
    return HandedOver(event, sent)


def queued(stack: Stack) -> int:
    """The messages on the intake queue, visible or delayed."""
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=stack.intake_queue,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
    )["Attributes"]
    return sum(int(value) for value in attributes.values())


def test_a_lifecycle_action_from_eventbridge_retried_goes_to_the_intake_queue_not_to_lambdas_retries(
    dynamodb: Answering, intake_fn: ModuleType, stack: Stack, handed_over: HandedOver
) -> None:
    # Given a terminate action's event from EventBridge, and DynamoDB throttling its record's write, When intake
    # is invoked with it, Then the invocation succeeds (the fixture: before, TransientError, Lambda's error)
    event, sent = handed_over.event, handed_over.sent

    # And the event is on the intake queue as EventBridge sent it, delayed as a record of the queue retried on
    # purpose would be at its first receive: 10 s for a throttle, which no cached answer holds back (60 s before:
    # past the 30 s heartbeat timeout Auto Scaling allows a hook, its action lapsed unless the sweeper came first)
    assert [json.loads(call["MessageBody"]) for call in sent] == [event]
    assert sent[0]["DelaySeconds"] == FIRST_RETRY_SECONDS
    dynamodb.answer = None
    assert records() == []

    # And its delivery by the queue, the throttle over, takes it in
    assert queued(stack) == 1
    response = intake_fn.handler(sqs_event(handed_over.body), LambdaContext())
    assert response == {"batchItemFailures": []}
    (record,) = records()
    assert work(stack.drain_queue) == [{"record_id": record["id"], "seq": 0, "step": "acquire-slot"}]


@pytest.mark.parametrize("answer", [REFUSED, THROTTLED], ids=["refused", "queue-refused"])
def test_what_the_queue_cannot_retry_still_fails_the_invocation(
    dynamodb: Answering,
    intake_fn: ModuleType,
    stack: Stack,
    sent: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
    answer: tuple[int, dict[str, str]],
) -> None:
    # Given a terminate action's event from EventBridge whose record's write is refused (not an ordinary retry),
    # or throttled while the intake queue refuses the function's message
    event = happening_now(load_event("eventbridge-terminate.json"))
    dynamodb.answer = answer
    if answer is THROTTLED:
        monkeypatch.setenv("NODECYCLE_INTAKE_QUEUE_URL", stack.intake_queue + "-deleted")

    # When intake is invoked with it, Then the invocation fails (Lambda retries it, then its on-failure
    # destination), nothing on the queue
    with pytest.raises(AccessRefused if answer is REFUSED else TransientError):
        intake_fn.handler(event, LambdaContext())
    assert queued(stack) == 0


def test_a_disruption_from_eventbridge_retried_still_fails_the_invocation(
    dynamodb: Answering, intake_fn: ModuleType, stack: Stack, sent: list[dict[str, Any]]
) -> None:
    # Given EC2's Spot interruption warning from EventBridge (acted on unconfirmed: by the queue, EC2 must confirm
    # it), and DynamoDB throttling its record's write
    event = ec2_event("eventbridge-spot-interruption.json", launch())
    dynamodb.answer = THROTTLED

    # When intake is invoked with it, Then it is retried by Lambda (the invocation fails), not by the queue
    with pytest.raises(TransientError):
        intake_fn.handler(event, LambdaContext())
    assert sent == []
    assert queued(stack) == 0


@pytest.mark.parametrize(
    ("retry_after", "delay"),
    [(None, FIRST_RETRY_SECONDS), (3.0, FIRST_RETRY_SECONDS), (45.2, 46), (60.0, 60), (3600.0, 60)],
)
def test_an_event_handed_to_the_queue_waits_what_its_error_says_and_no_less_than_a_first_retry(
    retry_after: float | None, delay: int
) -> None:
    # A hook read before its action started, or the owner's listing read too lately, says when it is read again
    # (its retry_after): the event waits that long, so its retry finds the answer read again (a server's
    # Retry-After is capped as every wait of it is)
    from nodecycle.wiring.intake_requeue import requeue_delay

    assert requeue_delay(TransientError("x", retry_after=retry_after)) == delay
