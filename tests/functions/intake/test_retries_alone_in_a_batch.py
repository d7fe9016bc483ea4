"""A record retried on purpose alone in its SQS batch (a TransientError: DynamoDB throttled) is reported as the
batch's item failure, SQS delivering it again, and never fails the invocation: the functions' error alarms
(AWS/Lambda Errors > 0 over 5 minutes) would page an operator for an ordinary retry. An unexpected failure alone
(a bug, a role refused a call) still fails the invocation, where those alarms see it. For the intake queue and
the work queues (drain, eip), which share the partial batch response."""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from nodecycle.domain.engine import StepEngine
from nodecycle.domain.intake import Intake
from nodecycle.domain.model import Step
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.entrypoints import BatchFailed
from tests.functions.intake.test_refused_writes import Answering, answering, hook_notifications
from tests.support.events import sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack

THROTTLED = (400, {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded"})
REFUSED = (400, {"Code": "AccessDeniedException", "Message": "not authorized to perform dynamodb:*"})


@pytest.fixture
def dynamodb(stack: Stack) -> Iterator[Answering]:
    with answering("before-call.dynamodb", Answering()) as answers:
        yield answers


def a_bug(*_: Any, **__: Any) -> Any:
    raise AttributeError("'NoneType' object has no attribute 'token'")


@pytest.mark.parametrize(
    ("answer", "fails"), [(THROTTLED, False), (REFUSED, True)], ids=["throttled", "refused"]
)
def test_a_lone_intake_record_retried_is_a_batch_item_failure_and_a_refusal_fails_the_invocation(
    dynamodb: Answering, intake_fn: ModuleType, answer: tuple[int, dict[str, str]], fails: bool
) -> None:
    # Given a hook notification alone in its batch, and DynamoDB throttling its record's write (or refusing it)
    dynamodb.answer = answer
    batch = sqs_event(hook_notifications()[0])

    # When intake takes it in
    if fails:
        # Then a refusal, which does not pass by itself, fails the invocation (the function's error alarm)
        with pytest.raises(BatchFailed):
            intake_fn.handler(batch, LambdaContext())
        return
    response = intake_fn.handler(batch, LambdaContext())

    # Then a throttle is retried (SQS delivers it again) and the invocation succeeds (before: BatchFailed)
    assert response == {"batchItemFailures": [{"itemIdentifier": "message-0"}]}


def test_a_lone_intake_record_failing_for_a_bug_still_fails_the_invocation(
    intake_fn: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a hook notification alone in its batch, whose intake fails for a programming error
    monkeypatch.setattr(Intake, "accept", a_bug)

    # When intake takes it in, Then the invocation fails (the function's error alarm)
    with pytest.raises(BatchFailed) as failed:
        intake_fn.handler(sqs_event(hook_notifications()[0]), LambdaContext())
    assert isinstance(failed.value.__cause__, AttributeError)


@pytest.mark.parametrize("function", ["drain", "eip"])
def test_a_lone_work_record_retried_is_a_batch_item_failure_and_a_bug_fails_the_invocation(
    dynamodb: Answering, monkeypatch: pytest.MonkeyPatch, function: str
) -> None:
    # Given a work queue's function, and a work message alone in its batch whose record's read DynamoDB throttles
    handler = load_function(function).handler
    body = WorkMessage(record_id="i-0aaaaaaaaaaaaaaa1/terminate/token", seq=0, step=Step.COMPLETE)
    dynamodb.answer = THROTTLED

    # When the function takes it, Then it is retried (SQS delivers it again) and the invocation succeeds
    # (before: BatchFailed)
    assert handler(sqs_event(body.model_dump_json()), LambdaContext()) == {
        "batchItemFailures": [{"itemIdentifier": "message-0"}]
    }

    # And when its step fails for a programming error instead, the invocation fails (the function's error alarm)
    dynamodb.answer = None
    monkeypatch.setattr(StepEngine, "handle", a_bug)
    with pytest.raises(BatchFailed) as failed:
        handler(sqs_event(body.model_dump_json()), LambdaContext())
    assert isinstance(failed.value.__cause__, AttributeError)
