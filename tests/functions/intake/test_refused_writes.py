"""Intake when AWS refuses its record's write or its first message (a service control policy, IAM propagating
after an update), as the sandbox's IAM enforcement refuses on moto: the event is retried (the queue's record
alone fails; EventBridge's invocation fails), never rejected as bad input, and once the refusal ends its retry
starts the lifecycle's work."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

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
