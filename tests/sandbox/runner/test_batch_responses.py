"""What Lambda makes of a function's partial batch response (``ReportBatchItemFailures``), case by case as
its documentation lists them ("Success and failure conditions" of Lambda with Amazon SQS)."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle_sandbox.runner.handlers import call_handler
from nodecycle_sandbox.runner.invokers import InvocationResult
from nodecycle_sandbox.runner.sqs_source import failed_message_ids

BATCH = ["m1", "m2", "m3"]


def _returned(response: Any, ok: bool = True) -> InvocationResult:
    return InvocationResult(request_id="r", ok=ok, started_at=0.0, finished_at=0.0, response=response)


@pytest.mark.parametrize(
    "response",
    [{"batchItemFailures": []}, {"batchItemFailures": None}, {}, None],
    ids=["empty-list", "null-list", "empty-response", "null-response"],
)
def test_lambda_deletes_the_whole_batch_on_what_it_treats_as_complete_success(response: Any) -> None:
    assert failed_message_ids(_returned(response), BATCH, report_failures=True) == []


def test_only_the_reported_messages_go_back() -> None:
    response = {"batchItemFailures": [{"itemIdentifier": "m2"}]}
    assert failed_message_ids(_returned(response), BATCH, report_failures=True) == ["m2"]


@pytest.mark.parametrize(
    "response",
    [
        "ok",
        ["m2"],
        True,
        {"batchItemFailures": "m2"},
        {"batchItemFailures": {"itemIdentifier": "m2"}},
        {"batchItemFailures": {}},
        {"batchItemFailures": ""},
        {"batchItemFailures": False},
        {"batchItemFailures": 0},
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": [{"itemIdentifier": None}]},
        {"batchItemFailures": [{"itemId": "m2"}]},
        {"batchItemFailures": [{"itemIdentifier": "m9"}]},
    ],
    ids=[
        "a-string",
        "a-list",
        "a-boolean",
        "failures-not-a-list",
        "failures-an-object",
        # Neither an empty nor a null list (Lambda's complete successes): not a list at all, a response it cannot
        # read. Falsy in Python, these read as "no failures" once: the batch was deleted, where Lambda returns it.
        "failures-an-empty-object",
        "failures-an-empty-string",
        "failures-false",
        "failures-zero",
        "empty-identifier",
        "null-identifier",
        "bad-key-name",
        "a-message-not-in-the-batch",
    ],
)
def test_lambda_returns_the_whole_batch_on_what_it_treats_as_complete_failure(response: Any) -> None:
    assert failed_message_ids(_returned(response), BATCH, report_failures=True) == BATCH


def test_a_failed_invocation_returns_the_whole_batch_whatever_it_reported() -> None:
    result = _returned({"batchItemFailures": []}, ok=False)
    assert failed_message_ids(result, BATCH, report_failures=True) == BATCH


def test_without_report_batch_item_failures_a_response_is_not_read() -> None:
    response = {"batchItemFailures": [{"itemIdentifier": "m2"}]}
    assert failed_message_ids(_returned(response), BATCH, report_failures=False) == []


def test_a_response_is_read_as_the_json_lambda_returns() -> None:
    # A tuple is a JSON array once Lambda has the response: its failures are a list, read as such (not "not a
    # list", the whole batch), in an inline sandbox too, whose handlers return Python objects.
    outcome = call_handler(
        lambda event, context: {"batchItemFailures": ({"itemIdentifier": "m2"},)}, {}, None
    )
    result = _returned(outcome["response"])
    assert failed_message_ids(result, BATCH, report_failures=True) == ["m2"]
