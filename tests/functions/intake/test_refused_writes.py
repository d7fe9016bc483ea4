"""Intake when AWS refuses its record's write or its first message (a service control policy, IAM propagating
after an update), as the sandbox's IAM enforcement refuses on moto: the event is retried (the queue's record
alone fails; EventBridge's invocation fails), never rejected as bad input, and once the refusal ends its retry
starts the lifecycle's work. Likewise when DynamoDB throttles the write of a record with its claim, answers a
500, or cancels the transaction for a reason that is no condition (never read as a duplicate)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders

from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.errors import AccessRefused
from nodecycle_sandbox.aws.install import install
from nodecycle_sandbox.iam.identities import IDENTITIES
from tests.functions.intake.conftest import make_group
from tests.support.emf import metric
from tests.support.events import happening_now, load_event, sqs_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack, receive_all

ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/nodecycle-intake-refused"
KEY = "AKIAREFUSEDINTAKE001"  # this module's own: no other test's calls are evaluated against its role


def records() -> list[dict[str, Any]]:
    items = boto3.resource("dynamodb").Table("nodecycle-lifecycle").scan()["Items"]
    return [item for item in items if "step" in item]


@pytest.fixture
def refuse(stack: Stack) -> Callable[[str | None], None]:
    """Intake acting as a role that may do everything but ``action`` (``refuse(None)``: the refusal lifted)."""
    install()  # the sandbox's Auto Scaling and its IAM enforcement
    make_group("nodes-general")

    def refuse(action: str | None) -> None:
        statements: list[dict[str, Any]] = [{"Effect": "Allow", "Action": "*", "Resource": "*"}]
        if action is not None:
            statements.append({"Effect": "Deny", "Action": action, "Resource": "*"})
        IDENTITIES.register(
            roles=[
                {
                    "arn": ROLE,
                    "policies": [
                        {"source": "test", "document": {"Version": "2012-10-17", "Statement": statements}}
                    ],
                }
            ],
            keys=[{"access_key": KEY, "role_arn": ROLE, "session_name": "intake", "account": ACCOUNT}],
        )

    return refuse


@pytest.fixture
def intake_as_role(refuse: Callable[[str | None], None], monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The intake function with the role's credentials (boto3's default session, which the adapters' clients
    come from, made again to read them). The test's own calls made after are the role's too: it refuses one
    call only."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    return load_function("intake")


def hook_notifications() -> list[str]:
    first = happening_now(load_event("sqs-hook-terminate.json"))["Records"][0]["body"]
    second = {
        **json.loads(first),
        "EC2InstanceId": "i-0123456789abcdef0",
        "LifecycleActionToken": "11111111-2222-4333-8444-555555555555",
    }
    return [first, json.dumps(second)]


def test_a_refused_first_message_fails_its_records_and_their_retry_starts_the_work(
    refuse: Callable[[str | None], None],
    intake_as_role: ModuleType,
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given intake refused sqs:SendMessage, and a batch of two terminate hook notifications beside a bad record
    refuse("sqs:SendMessage")
    batch = sqs_event(*hook_notifications(), "{truncated")

    # When intake takes in the batch
    response = intake_as_role.handler(batch, LambdaContext())

    # Then the two actions fail alone (SQS delivers them again, then dead-letters them), the bad one is
    # rejected, and each refusal is an ERROR line naming the call and the code; nothing is rejected as bad input
    # but the bad record
    assert response == {
        "batchItemFailures": [{"itemIdentifier": "message-0"}, {"itemIdentifier": "message-1"}]
    }
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="malformed-json") == 1
    errors = [json.loads(line) for line in output.splitlines() if '"level":"ERROR"' in line]
    assert sum("sending work to the drain queue: refused (AccessDenied)" in str(e) for e in errors) == 2, (
        errors
    )
    assert receive_all(stack.drain_queue) == []

    # When the refusal ends and SQS delivers the two again, after the queue's visibility timeout (180 s)
    refuse(None)
    later = datetime.now(UTC) + timedelta(seconds=180)
    monkeypatch.setattr(SystemClock, "now", lambda self: later)
    again = sqs_event(*hook_notifications())
    response = intake_as_role.handler(again, LambdaContext())

    # Then they go through: each lifecycle (its record written at the first delivery) has its first step sent
    # (overdue by then: its message was lost)
    assert response == {"batchItemFailures": []}
    ids = sorted(record["id"] for record in records())
    assert len(ids) == 2
    sent = [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)]
    assert sorted((m["record_id"], m["step"]) for m in sent) == [(id_, "acquire-slot") for id_ in ids]
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected") == 0


@pytest.mark.parametrize("refused", ["dynamodb:PutItem", "autoscaling:DescribeLifecycleHooks"])
def test_an_eventbridge_event_whose_intake_is_refused_fails_for_lambda_to_retry(
    refuse: Callable[[str | None], None],
    intake_as_role: ModuleType,
    stack: Stack,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    refused: str,
) -> None:
    # Given intake refused its record's write (or the reading of the action's hook)
    refuse(refused)

    # When EventBridge invokes it with a terminate action
    with pytest.raises(AccessRefused):
        intake_as_role.handler(happening_now(load_event("eventbridge-terminate.json")), LambdaContext())

    # Then the invocation fails (Lambda retries it twice, then the on-failure record), nothing written or sent,
    # nothing rejected as bad input
    refuse(None)
    assert records() == []
    assert receive_all(stack.drain_queue) == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected") == 0


class Answering:
    """DynamoDB answering each call of the adapters' clients it is registered for with ``answer`` while it is set
    (after botocore's retries: a throttle that lasts, a refusal): a status and the error's code and message."""

    def __init__(self) -> None:
        self.answer: tuple[int, dict[str, Any]] | None = None

    def __call__(self, **_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        if self.answer is None:
            return None
        status, error = self.answer
        return AWSResponse("https://dynamodb", status, HTTPHeaders(), None), {
            **self.parsed(error),
            "ResponseMetadata": {},
        }

    def parsed(self, error: dict[str, Any]) -> dict[str, Any]:
        return {"Error": error}


class Cancelling(Answering):
    """DynamoDB answering each TransactWriteItems of the adapters' clients with ``answer`` while it is set: what
    is left once botocore's retries are spent (a throttle, a 500), or a transaction cancelled for another reason
    than a condition (another transaction on one of its items, throttling of one of them): the whole parsed
    answer (its error and the cancellation reasons)."""

    def parsed(self, error: dict[str, Any]) -> dict[str, Any]:
        return error


@contextmanager
def answering[A: Answering](event: str, answers: A) -> Iterator[A]:
    """``answers`` registered for the botocore ``event`` (before-call.dynamodb[.Operation]) on boto3's default
    session, before the adapters' clients are made from it (each copies its handlers)."""
    events = boto3._get_default_session().events
    # (a before-call handler that answers is botocore's answer to the call: the stubs type it as answering None)
    events.register(event, answers, unique_id=f"tests.Answering:{event}")  # type: ignore[arg-type]
    yield answers
    answers.answer = None  # (a client made meanwhile keeps the handler: it must answer nothing after)
    events.unregister(event, unique_id=f"tests.Answering:{event}")


@pytest.fixture
def transactions(stack: Stack) -> Iterator[Cancelling]:
    with answering("before-call.dynamodb.TransactWriteItems", Cancelling()) as cancelling:
        yield cancelling


def _cancelled(*codes: str) -> tuple[int, dict[str, Any]]:
    error = {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"}
    return 400, {"Error": error, "CancellationReasons": [{"Code": code} for code in codes]}


@pytest.mark.parametrize(
    "answer",
    [
        (400, {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded"}}),
        (500, {"Error": {"Code": "InternalServerError", "Message": "Internal server error"}}),
        _cancelled("TransactionConflict", "None"),
        _cancelled("None", "ThrottlingError"),
    ],
    ids=["throughput-exceeded", "internal-error", "conflict-on-the-record", "throttled-claim"],
)
def test_a_record_and_claim_write_dynamodb_refuses_or_cancels_for_no_condition_is_retried_not_taken_for_a_duplicate(
    transactions: Cancelling,
    intake_fn: ModuleType,
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    answer: tuple[int, dict[str, Any]],
) -> None:
    # Given a batch of two terminate hook notifications beside a bad record, and DynamoDB refusing the write of
    # a record with its action's claim (one transaction), or cancelling it for a reason that is no condition
    # (read as "the record is there", the action would be acknowledged as a duplicate and never drained)
    transactions.answer = answer

    # When intake takes in the batch
    response = intake_fn.handler(sqs_event(*hook_notifications(), "{truncated"), LambdaContext())

    # Then the two actions fail alone (SQS delivers them again), nothing is written or sent, none is counted a
    # duplicate, and the bad record is rejected
    assert response == {
        "batchItemFailures": [{"itemIdentifier": "message-0"}, {"itemIdentifier": "message-1"}]
    }
    assert records() == []
    assert receive_all(stack.drain_queue) == []
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsDuplicate") in (None, 0)
    assert metric(output, "LifecycleEventsRejected", reason="malformed-json") == 1

    # When DynamoDB takes writes again and SQS delivers the two again
    transactions.answer = None
    response = intake_fn.handler(sqs_event(*hook_notifications()), LambdaContext())

    # Then each has its record and one first step
    assert response == {"batchItemFailures": []}
    ids = sorted(record["id"] for record in records())
    assert len(ids) == 2
    sent = [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)]
    assert sorted((m["record_id"], m["step"]) for m in sent) == [(id_, "acquire-slot") for id_ in ids]
