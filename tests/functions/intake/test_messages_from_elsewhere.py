"""Messages of another account or region, on moto: the intake function knows where it runs (its own ARN), and an
event or hook notification that says it is from elsewhere cannot be of this stack's groups, whatever names they
share. Rejected at intake, naming what was wrong, never written as a record (whose first step would end it as an
action Auto Scaling does not know, a page for nothing), never retried."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from tests.functions.intake.test_intake_function import records, work
from tests.functions.intake.test_redriven_dead_letters import on_failure
from tests.support.emf import metric
from tests.support.events import happening_now, load_event, sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

ELSEWHERE = {"account": ("210987654321", "wrong-account"), "region": ("us-east-1", "wrong-region")}


def eventbridge_body() -> dict[str, Any]:
    return happening_now(load_event("eventbridge-terminate.json"))


def hook_body() -> dict[str, Any]:
    body: dict[str, Any] = json.loads(
        happening_now(load_event("sqs-hook-terminate.json"))["Records"][0]["body"]
    )
    return body


def elsewhere(body: dict[str, Any], field: str) -> dict[str, Any]:
    value = ELSEWHERE[field][0]
    if "Service" in body:  # a hook notification names its account alone
        return {**body, "AccountId": value}
    return {**body, field: value}


Shape = Callable[[dict[str, Any]], dict[str, Any]]


def by_queue(body: dict[str, Any]) -> dict[str, Any]:
    return body


def redriven(body: dict[str, Any]) -> dict[str, Any]:
    return on_failure(body)


@pytest.mark.parametrize("field", ["account", "region"])
def test_a_lifecycle_action_of_another_account_or_region_is_rejected_by_eventbridge(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    # Given a lifecycle action of a group of the same name in another account or region (a rule edited, an
    # event bus that takes others' events), delivered by EventBridge
    event = elsewhere(eventbridge_body(), field)

    # When intake receives it
    assert intake_fn.handler(event, LambdaContext()) is None  # (an exception would make Lambda retry it)

    # Then nothing is written or sent, and one ERROR line and the metric name what was wrong
    assert records() == []
    assert work(stack.drain_queue) == []
    output = capsys.readouterr().out
    value, reason = ELSEWHERE[field]
    assert metric(output, "LifecycleEventsRejected", reason=reason) == 1
    (error,) = [json.loads(line) for line in output.splitlines() if '"level":"ERROR"' in line]
    assert value in error["message"]


@pytest.mark.parametrize(
    ("make", "field", "shape"),
    [
        (eventbridge_body, "account", by_queue),
        (eventbridge_body, "region", by_queue),
        (hook_body, "account", by_queue),
        (eventbridge_body, "region", redriven),
    ],
    ids=["eventbridge-account", "eventbridge-region", "hook-account", "redriven-region"],
)
def test_a_message_of_another_account_or_region_on_the_queue_is_rejected_and_fails_no_batch(
    intake_fn: ModuleType,
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[], dict[str, Any]],
    field: str,
    shape: Shape,
) -> None:
    # Given a batch of a valid action and a message that says it is from another account or region, naming
    # another instance of the same group
    valid = hook_body()
    foreign = make()
    if "detail" in foreign:
        foreign["detail"] = {**foreign["detail"], "EC2InstanceId": "i-0123456789abcdef0"}
    else:
        foreign["EC2InstanceId"] = "i-0123456789abcdef0"

    # When intake takes the batch in
    result = intake_fn.handler(sqs_event(valid, shape(elsewhere(foreign, field))), LambdaContext())

    # Then the valid action alone is recorded, the other is dropped (not retried) with its reason
    assert result == {"batchItemFailures": []}
    assert [record["instance_id"] for record in records()] == [valid["EC2InstanceId"]]
    output = capsys.readouterr().out
    value, reason = ELSEWHERE[field]
    assert metric(output, "LifecycleEventsRejected", reason=reason) == 1
    (error,) = [json.loads(line) for line in output.splitlines() if '"level":"ERROR"' in line]
    assert value in error["message"]


def test_a_disruption_of_another_account_is_rejected_before_ec2_is_asked(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a Spot interruption warning of another account's instance, delivered by EventBridge
    event = elsewhere(happening_now(load_event("eventbridge-spot-interruption.json")), "account")

    # When intake receives it
    intake_fn.handler(event, LambdaContext())

    # Then it is rejected for its account (not as an instance EC2 does not know: this account's EC2 was not
    # the one to ask)
    assert records() == []
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="wrong-account") == 1
    assert metric(output, "LifecycleEventsRejected", reason="unknown-instance") == 0


def test_a_message_of_this_account_and_region_is_taken_in(intake_fn: ModuleType, stack: Stack) -> None:
    # Given this stack's own action, its account and region those of the function's ARN
    event = eventbridge_body()
    assert (event["account"], event["region"]) == ("123456789012", "eu-west-1")
    assert LambdaContext().invoked_function_arn.split(":")[3:5] == ["eu-west-1", "123456789012"]

    # When intake receives it, Then it is recorded
    intake_fn.handler(event, LambdaContext())
    assert len(records()) == 1
