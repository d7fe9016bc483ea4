"""What the intake dead-letter queue holds, sent back to the intake queue (the runbook's redrive: ``aws sqs
start-message-move-task``), on moto: each of its three shapes is taken in as the event it carries, with the
trust of a message of the queue; one that carries no event is rejected naming what was wrong, and fails no
batch."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from nodecycle.domain.intake_budget import OutOfTime
from nodecycle.domain.model import Transition
from tests.functions.intake.test_disruption_intake import (
    AWS_CALL,
    HOOK_INSTANCE,
    INTAKE_TIMEOUT_MILLIS,
    health_event,
    health_event_of,
    launch,
    many_scheduled,
    records,
    schedule,
    work,
)
from tests.support.emf import metric
from tests.support.events import happening_now, load_event, sqs_event
from tests.support.functions import AwsLatency, LambdaContext
from tests.support.stack import Stack


def on_failure(event: dict[str, Any], condition: str = "RetriesExhausted") -> dict[str, Any]:
    """The record Lambda sends its on-failure destination (the intake dead-letter queue) for an asynchronous
    invocation that failed: the event in ``requestPayload`` (AWS's "Capturing records of Lambda asynchronous
    invocations"; the sandbox runner writes the same)."""
    return {
        "version": "1.0",
        "timestamp": "2026-12-04T10:00:05.568Z",
        "requestContext": {
            "requestId": str(uuid.uuid4()),
            "functionArn": "arn:aws:lambda:eu-west-1:123456789012:function:nodecycle-intake:$LATEST",
            "condition": condition,
            "approximateInvokeCount": 3 if condition == "RetriesExhausted" else 0,
        },
        "requestPayload": event,
        "responseContext": {"statusCode": 200, "executedVersion": "$LATEST", "functionError": "Unhandled"},
        "responsePayload": {
            "errorMessage": "An error occurred (ProvisionedThroughputExceededException) when calling PutItem",
            "errorType": "ProvisionedThroughputExceededException",
        },
    }


@pytest.mark.parametrize("condition", ["RetriesExhausted", "EventAgeExceeded"])
def test_a_lifecycle_actions_on_failure_record_redriven_is_taken_in_as_its_event(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], condition: str
) -> None:
    # Given the on-failure record of a terminate action's event whose invocations all failed (or that waited
    # in Lambda's queue past its maximum age), sent back to the intake queue while the action is open
    event = happening_now(load_event("eventbridge-terminate.json"))

    # When intake receives it
    response = intake_fn.handler(sqs_event(on_failure(event, condition)), LambdaContext())

    # Then the action is recorded and its first step sent, as its event would have been
    assert response == {"batchItemFailures": []}
    (record,) = records()
    assert (record["instance_id"], record["token"]) == (
        HOOK_INSTANCE,
        event["detail"]["LifecycleActionToken"],
    )
    assert work(stack.drain_queue) == [{"record_id": record["id"], "seq": 0, "step": "acquire-slot"}]
    output = capsys.readouterr().out
    assert '"level":"ERROR"' not in output
    # (told in the log: the operator redriving sees what came back, and by which path)
    assert f"an on-failure record redriven: its event {event['id']} ({condition} after" in output
    assert '"delivery":"sqs-redriven"' in output


@pytest.mark.parametrize("shape", ["on-failure record", "bare event"])
def test_a_redriven_event_whose_action_was_taken_in_since_is_a_duplicate(
    intake_fn: ModuleType, stack: Stack, shape: str
) -> None:
    # Given a terminate action taken in by its hook notification (the queue), and its EventBridge event
    # dead-lettered minutes before: as Lambda's on-failure record, or bare as EventBridge's rule writes what
    # it could not deliver
    event = happening_now(load_event("eventbridge-terminate.json"))
    intake_fn.handler(happening_now(load_event("sqs-hook-terminate.json")), LambdaContext())
    dead = on_failure(event) if shape == "on-failure record" else event

    # When the dead letter is redriven
    response = intake_fn.handler(sqs_event(dead), LambdaContext())

    # Then it starts nothing more: one record, one unit of work
    assert response == {"batchItemFailures": []}
    assert len(records()) == 1
    assert len(work(stack.drain_queue)) == 1


def test_a_redriven_spot_interruption_is_confirmed_with_ec2_as_the_queues_events_are(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an On-Demand instance of a managed group and a Spot interruption warning of it wrapped as an
    # on-failure record: anyone allowed to send to the intake queue can write one (within its two minutes,
    # which by EventBridge would be acted on at once)
    instance = launch()
    event = happening_now(load_event("eventbridge-spot-interruption.json"))
    event["detail"]["instance-id"] = instance

    # When it arrives on the intake queue
    response = intake_fn.handler(sqs_event(on_failure(event)), LambdaContext())

    # Then EC2 is asked, does not confirm it, and nothing is drained
    assert response == {"batchItemFailures": []}
    assert records() == []
    assert metric(capsys.readouterr().out, "LifecycleEventsRejected", reason="unconfirmed") == 1


def test_a_health_event_dead_lettered_with_its_progress_kept_is_continued_by_its_redrive(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an AWS Health event naming 120 instances of a managed group, cut short by the function's time
    # (its progress kept), whose later attempts failed: its on-failure record is in the dead-letter queue
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    instances = many_scheduled(120, starts)
    event = health_event_of(instances, starts)
    latency = AwsLatency(per_call=AWS_CALL)
    with latency.counting():
        with pytest.raises(OutOfTime):
            intake_fn.handler(event, LambdaContext(remaining_millis=INTAKE_TIMEOUT_MILLIS, clock=latency))
        taken_in = len(records())
        assert 0 < taken_in < len(instances)

        # When the record is redriven to the intake queue, delivered until it is through
        batch = sqs_event(on_failure(event))
        for _ in range(3):
            context = LambdaContext(remaining_millis=INTAKE_TIMEOUT_MILLIS, clock=latency)
            try:
                intake_fn.handler(batch, context)
                break
            except Exception:  # the batch's one record out of time: SQS delivers it again
                assert len(records()) > taken_in
                taken_in = len(records())

    # Then it continues where the event stopped: each instance taken in once, none twice
    assert sorted(record["instance_id"] for record in records()) == sorted(instances)
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") == 0


def test_a_redriven_health_event_is_taken_in_after_the_other_records_of_its_batch(
    intake_fn: ModuleType, stack: Stack
) -> None:
    # Given a batch of the intake queue: a redriven on-failure record of an AWS Health event naming 120
    # instances (more than one invocation's time), then a terminate hook notification
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    instances = many_scheduled(120, starts)
    (hook,) = happening_now(load_event("sqs-hook-terminate.json"))["Records"]
    batch = sqs_event(on_failure(health_event_of(instances, starts)), hook["body"])
    latency = AwsLatency(per_call=AWS_CALL)

    # When intake receives it, its time running out by the AWS calls it makes
    with latency.counting():
        response = intake_fn.handler(
            batch, LambdaContext(remaining_millis=INTAKE_TIMEOUT_MILLIS, clock=latency)
        )

    # Then the hook's action is taken in and only the Health event goes back to the queue, as a Health
    # event's own message would (not the notification, its heartbeat timeout running)
    assert response == {"batchItemFailures": [{"itemIdentifier": "message-0"}]}
    assert HOOK_INSTANCE in {record["instance_id"] for record in records()}


@pytest.mark.parametrize(
    ("payload", "says", "reason"),
    [
        (None, "requestPayload is missing", "missing-field"),
        ("not an event", "requestPayload is a JSON str", "unknown-shape"),
        ({"hello": "world"}, "requestPayload is not an EventBridge event", "unknown-shape"),
        ([1, 2], "requestPayload is a JSON list", "unknown-shape"),
        # a hook notification is never an asynchronous invocation's payload: made up
        (
            json.loads(load_event("sqs-hook-terminate.json")["Records"][0]["body"]),
            "not an EventBridge",
            "unknown-shape",
        ),
    ],
)
def test_an_on_failure_record_that_carries_no_event_is_rejected_naming_its_payload(
    intake_fn: ModuleType,
    stack: Stack,
    capsys: pytest.CaptureFixture[str],
    payload: Any,
    says: str,
    reason: str,
) -> None:
    # Given a batch: a valid hook notification and an on-failure record with no event in it
    (hook,) = happening_now(load_event("sqs-hook-terminate.json"))["Records"]
    broken = on_failure({})
    if payload is None:
        del broken["requestPayload"]
    else:
        broken["requestPayload"] = payload

    # When intake receives it
    response = intake_fn.handler(sqs_event(hook["body"], broken), LambdaContext())

    # Then the broken one is rejected (never retried: the same bytes fail the same way), its error naming the
    # payload, and the notification is taken in
    assert response == {"batchItemFailures": []}
    assert [record["instance_id"] for record in records()] == [HOOK_INSTANCE]
    output = capsys.readouterr().out
    errors = [json.loads(line)["message"] for line in output.splitlines() if '"level":"ERROR"' in line]
    assert len(errors) == 1
    assert says in errors[0], errors
    assert metric(output, "LifecycleEventsRejected", reason=reason) == 1


def test_a_redriven_maintenance_is_timed_by_ec2(intake_fn: ModuleType, stack: Stack) -> None:
    # Given one instance's retirement EC2 lists three days out, and its Health event's on-failure record
    instance = launch()
    starts = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    schedule(instance, starts)

    # When the record is redriven
    intake_fn.handler(sqs_event(on_failure(health_event(instance, starts))), LambdaContext())

    # Then the maintenance is recorded for its instance
    (record,) = records()
    assert (record["instance_id"], record["transition"]) == (instance, Transition.SCHEDULED_CHANGE.value)
