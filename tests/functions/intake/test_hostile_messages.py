"""Messages of the right shape with the wrong types, and bodies no parser should trust, on the intake queue
(anyone allowed to send to it can write them): each is rejected with an error that names what was wrong,
nothing is taken in for it, it is not retried (the same bytes fail the same way), and the rest of its batch
is taken in."""

from __future__ import annotations

import json
from datetime import datetime
from types import ModuleType
from typing import Any

import pytest

from tests.functions.intake.test_intake_function import records
from tests.support.emf import metric
from tests.support.events import happening_now, load_event, sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack, receive_all

# An instance and token of the valid action of each batch other than the sample's, so that a hostile body
# taken in by mistake shows as a record of its own
OTHER_INSTANCE = "i-0123456789abcdef0"
OTHER_TOKEN = "11111111-2222-4333-8444-555555555555"


def hook_notification() -> dict[str, Any]:
    body = happening_now(load_event("sqs-hook-terminate.json"))["Records"][0]["body"]
    data: dict[str, Any] = json.loads(body)
    return data


def eventbridge_action() -> dict[str, Any]:
    return happening_now(load_event("eventbridge-terminate.json"))


def _epoch(data: dict[str, Any], field: str) -> int:
    """``data``'s time ``field`` as the number of seconds since the epoch (the same instant, another type)."""
    return int(datetime.fromisoformat(str(data[field]).replace("Z", "+00:00")).timestamp())


def _hook_cases() -> dict[str, tuple[str | dict[str, Any], str, str]]:
    """Hostile hook notifications: body, the rejection's reason, what its error must name."""
    valid = hook_notification()
    return {
        "instance id a number": ({**valid, "EC2InstanceId": 42}, "invalid-field", "EC2InstanceId"),
        "token a list": (
            {**valid, "LifecycleActionToken": [valid["LifecycleActionToken"]]},
            "invalid-field",
            "LifecycleActionToken",
        ),
        "group a number": ({**valid, "AutoScalingGroupName": 7}, "invalid-field", "AutoScalingGroupName"),
        "account a number": ({**valid, "AccountId": 123456789012}, "invalid-field", "AccountId"),
        "time a boolean": ({**valid, "Time": True}, "invalid-field", "Time"),
        # AWS writes its times as ISO 8601 strings: a number is read as seconds or milliseconds since the
        # epoch by its size, a guess no AWS message needs
        "time in seconds": ({**valid, "Time": _epoch(valid, "Time")}, "invalid-field", "Time"),
        "time in milliseconds": (
            {**valid, "Time": _epoch(valid, "Time") * 1000},
            "invalid-field",
            "Time",
        ),
        "NaN for a time": (
            json.dumps({**valid, "Time": float("nan")}),  # (Python writes NaN, which JSON has not)
            "invalid-field",
            "Time",
        ),
    }


def _eventbridge_cases() -> dict[str, tuple[str | dict[str, Any], str, str]]:
    """Hostile EventBridge events and bodies no parser should trust: body, reason, what its error names."""
    valid = eventbridge_action()
    return {
        "detail a string": ({**valid, "detail": "x"}, "invalid-field", "detail"),
        "resources a string": ({**valid, "resources": "x"}, "invalid-field", "resources"),
        "source a list": ({**valid, "source": [valid["source"]]}, "wrong-source", "source"),
        "detail-type an object": (
            {**valid, "detail-type": {"a": 1}},
            "unsupported-detail-type",
            "detail-type",
        ),
        "time in seconds": ({**valid, "time": _epoch(valid, "time")}, "invalid-field", "time"),
        "not JSON, a megabyte": ("x" * (1024 * 1024), "malformed-json", "not JSON"),
        "nested past the parser": ("[" * 100_000 + "]" * 100_000, "malformed-json", "not JSON"),
        "a number past Python's digits": ("1" * 5000, "malformed-json", "not JSON"),
        "JSON null": ("null", "unknown-shape", "NoneType"),
        # (RFC 1123 dates, as AWS Health writes them: numbers past C's integers overflow the date parser)
        "a Health start whose zone is past C's integers": (
            health_event_starting("Mon, 07 Dec 2026 10:00:00 +99999999999999999999"),
            "invalid-field",
            "startTime",
        ),
        "a Health start whose seconds are past C's integers": (
            health_event_starting("Mon, 07 Dec 2026 10:00:99999999999999999999999 GMT"),
            "invalid-field",
            "startTime",
        ),
    }


def health_event_starting(start: str) -> dict[str, Any]:
    """An AWS Health event of scheduled maintenance whose ``startTime`` says ``start``."""
    event = load_event("eventbridge-health-scheduled-retirement.json")
    return {**event, "detail": {**event["detail"], "startTime": start}}


def _other_action() -> dict[str, Any]:
    return {**hook_notification(), "EC2InstanceId": OTHER_INSTANCE, "LifecycleActionToken": OTHER_TOKEN}


@pytest.mark.parametrize("cases", [_hook_cases, _eventbridge_cases], ids=["hook", "eventbridge"])
def test_hostile_bodies_are_rejected_naming_their_fault_and_the_rest_of_the_batch_is_taken_in(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str], cases: Any
) -> None:
    # Given a batch of hostile bodies around one valid action
    hostile: dict[str, tuple[str | dict[str, Any], str, str]] = cases()
    bodies = [body for body, _, _ in hostile.values()]
    batch = sqs_event(*bodies, _other_action())

    # When intake receives it
    result = intake_fn.handler(batch, LambdaContext())

    # Then none fails back to the queue, only the valid action is taken in, and each hostile body is rejected
    # once, with an error logged under its message id that names what was wrong
    assert result == {"batchItemFailures": []}
    assert [record["instance_id"] for record in records()] == [OTHER_INSTANCE]
    output = capsys.readouterr().out
    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    errors = {line.get("message_id"): line["message"] for line in lines if line.get("level") == "ERROR"}
    for index, (case, (_, _, named)) in enumerate(hostile.items()):
        said = errors.get(f"message-{index}", "")
        assert said.startswith("rejected a lifecycle event: "), (case, said)
        assert named in said, (case, said)
    reasons = [reason for _, reason, _ in hostile.values()]
    for reason in set(reasons):
        assert metric(output, "LifecycleEventsRejected", reason=reason) == reasons.count(reason), reason


def test_one_action_delivered_five_times_across_batches_and_paths_is_one_lifecycle_and_one_first_step(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given one terminate action, told by its hook's notification and by EventBridge (directly and by the queue)
    notification = hook_notification()
    by_queue = {**happening_now(load_event("sqs-eventbridge-terminate.json"))}
    bridged = json.loads(by_queue["Records"][0]["body"])

    # When it reaches intake five times, in four batches (one beside another action) and one direct invocation
    deliveries: list[dict[str, Any]] = [
        sqs_event(notification),
        eventbridge_action(),
        sqs_event(bridged),
        sqs_event(_other_action(), notification),
        sqs_event(notification),
    ]
    for delivery in deliveries:
        assert (intake_fn.handler(delivery, LambdaContext()) or {}).get("batchItemFailures") in (None, [])

    # Then it has one lifecycle and one first step (what the later deliveries sent is watches of that step,
    # which find it run, or send it again only if it was lost), and four duplicates were counted
    ids = sorted(record["id"] for record in records())
    (action,) = [id_ for id_ in ids if OTHER_INSTANCE not in id_]
    sent = [json.loads(m["Body"]) for m in receive_all(stack.drain_queue)]
    firsts = [m for m in sent if m["record_id"] == action and "watch" not in m]
    assert firsts == [{"record_id": action, "seq": 0, "step": "acquire-slot"}]
    assert metric(capsys.readouterr().out, "LifecycleEventsDuplicate") == 4
