"""A function stopped by hand at a reserved concurrency of 0 (the emergency stop the doctor's
``lambda.function.*.concurrency`` undoes): Lambda sends each of its asynchronous events (the intake rules', the
sweeper's schedule) to the on-failure destination at once, unrun, instead of keeping them until their maximum age
("for functions with reserved concurrency set to zero, all events will be automatically sent to the configured
DLQ or the on-failure event destination immediately", AWS's notice of August 2021; the sandbox does so:
tests/sandbox/runner/test_reserved_concurrency.py). The record's condition is ``ZeroReservedConcurrency`` and,
the function never having been asked, it has no ``responseContext`` nor ``responsePayload``.

The runbook says where those records go and what to do with them; its redrive of the intake dead-letter queue
sends every on-failure record back to the intake queue, whose intake must take such a record in as its event."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from nodecycle.contracts.events import REDRIVEN, from_sqs_body
from tests.support.events import happening_now, load_event

ROOT = Path(__file__).resolve().parents[2]


def entry(title: str) -> str:
    text = (ROOT / "docs/runbook.md").read_text()
    match = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^##)", text, flags=re.DOTALL | re.MULTILINE)
    assert match, title
    return " ".join(match.group(1).split())


def zero_concurrency_record(event: dict[str, Any]) -> dict[str, Any]:
    """What Lambda sends the intake dead-letter queue (intake's on-failure destination) for an event that came
    while intake's reserved concurrency was 0: the event, and no response."""
    return {
        "version": "1.0",
        "timestamp": "2026-12-04T10:00:05.568Z",
        "requestContext": {
            "requestId": "1b9a1c44-8d0c-4c9e-9f8e-0c6f3c0a7e11",
            "functionArn": "arn:aws:lambda:eu-west-1:123456789012:function:nodecycle-intake:$LATEST",
            "condition": "ZeroReservedConcurrency",
            "approximateInvokeCount": 0,
        },
        "requestPayload": event,
    }


@pytest.mark.parametrize("title", ["Intake dead letters", "Sweeper dead letters", "Sweeper not running"])
def test_the_runbook_says_a_function_stopped_at_zero_sends_its_events_to_its_dead_letters_at_once(
    title: str,
) -> None:
    text = entry(title)

    assert "ZeroReservedConcurrency" in text
    assert "at once" in text


def test_a_redriven_record_of_an_event_lambda_never_ran_is_taken_in_as_its_event() -> None:
    # Given a terminate action's event sent to the intake dead-letter queue while intake was stopped at 0,
    # moved back to the intake queue as the runbook's Intake dead letters entry says
    event = happening_now(load_event("eventbridge-terminate.json"))
    body = json.dumps(zero_concurrency_record(event))

    # When intake reads it
    received = from_sqs_body(body)

    # Then it is the action's event, taken in by the redrive's path
    (action,) = received
    assert getattr(action, "delivery", None) == REDRIVEN
