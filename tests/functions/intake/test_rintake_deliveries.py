"""What real deliveries do that the samples of the other intake tests do not: an EventBridge event whose ``detail``
another version of Auto Scaling writes (fields added, Origin and Destination left out, the token missing); free
text that JSON can write and no AWS API takes (a lone UTF-16 surrogate); a batch of ten one of whose records fails
for a bug; every SQS source's partial batch response. (Each held before these tests: kept for what the suite did not cover.)"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from nodecycle.domain.intake import Intake
from nodecycle.domain.model import LifecycleEvent
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.functions.intake.test_intake_function import records, work
from tests.support.emf import metric
from tests.support.events import happening_now, load_event, sqs_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack

ROOT = Path(__file__).resolve().parents[3]
INSTANCE = "i-0a1b2c3d4e5f60718"  # the samples'


def eventbridge_terminate(**detail: Any) -> dict[str, Any]:
    """The sample terminate action from EventBridge, now, with ``detail``'s fields changed (None: left out)."""
    event = happening_now(load_event("eventbridge-terminate.json"))
    changed = {**event["detail"], **detail}
    event["detail"] = {key: value for key, value in changed.items() if value is not None}
    return event


def hook_notification(sample: str = "sqs-hook-terminate.json", **fields: Any) -> dict[str, Any]:
    """The sample hook notification, now, with ``fields`` changed."""
    body = happening_now(load_event(sample))["Records"][0]["body"]
    data: dict[str, Any] = {**json.loads(body), **fields}
    return data


def log_lines(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def errors(output: str) -> list[str]:
    return [line["message"] for line in log_lines(output) if line.get("level") == "ERROR"]


@pytest.mark.parametrize(
    "detail",
    [
        {"LifecycleActionResult": "CONTINUE", "NewField": {"nested": [1, 2]}},
        {"Origin": None, "Destination": None},
        {"NotificationMetadata": None},
    ],
    ids=["fields added", "no origin or destination", "no metadata"],
)
def test_a_terminate_action_whose_detail_another_version_writes_is_taken_in(
    intake_fn: ModuleType, stack: Stack, detail: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the terminate action from EventBridge in a shape of another version of its detail (and a field
    # added to the envelope too)
    event = {**eventbridge_terminate(**detail), "new-envelope-field": "x"}

    # When intake receives it
    assert intake_fn.handler(event, LambdaContext()) is None

    # Then it is taken in as the sample is: one record, its drain's first step, no error
    (record,) = records()
    assert record["instance_id"] == INSTANCE
    assert [message["step"] for message in work(stack.drain_queue)] == ["acquire-slot"]
    assert errors(capsys.readouterr().out) == []


def test_a_terminate_action_without_its_token_is_rejected_by_name_and_not_retried(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a terminate action from EventBridge whose detail has no LifecycleActionToken (nothing can be completed
    # or heartbeated by it: the sweeper adopts the held action by its instance)
    event = eventbridge_terminate(LifecycleActionToken=None)

    # When intake receives it, Then the invocation succeeds (Lambda does not retry it: the same event fails the
    # same way), nothing is written or sent, and the error names the field
    assert intake_fn.handler(event, LambdaContext()) is None
    assert records() == []
    assert work(stack.drain_queue) == []
    output = capsys.readouterr().out
    (error,) = errors(output)
    assert "LifecycleActionToken is missing" in error
    assert metric(output, "LifecycleEventsRejected", reason="missing-field") == 1


# A lone UTF-16 surrogate, as a JSON string may write it (\ud800) and no AWS API takes (not a character UTF-8
# can encode): the same bytes fail the same way at every retry
SURROGATE = "\ud800"


def test_fields_no_aws_api_can_take_are_rejected_not_retried(
    intake_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch of hook notifications each with a lone surrogate in one of its fields (json.dumps writes it as
    # the escape \ud800, as anyone allowed to send to the queue can), beside another action
    bad = [
        {"NotificationMetadata": f"drain-timeout=600{SURROGATE}"},
        {"LifecycleHookName": f"nodecycle-terminate{SURROGATE}"},
        {"AutoScalingGroupName": f"nodes-general{SURROGATE}"},
        {"Origin": SURROGATE},
        {"RequestId": SURROGATE},
    ]
    other = hook_notification(EC2InstanceId="i-0123456789abcdef0", LifecycleActionToken=str(uuid.uuid4()))
    batch = sqs_event(*(hook_notification(**fields) for fields in bad), other)

    # When intake takes the batch in
    response = intake_fn.handler(batch, LambdaContext())

    # Then each bad record is rejected by the field's name (never retried into the dead-letter queue: the same
    # bytes fail the same way), and the other is taken in
    assert response == {"batchItemFailures": []}
    assert [record["instance_id"] for record in records()] == ["i-0123456789abcdef0"]
    output = capsys.readouterr().out
    assert metric(output, "LifecycleEventsRejected", reason="invalid-field") == len(bad)
    said = errors(output)
    for fields in bad:
        (field,) = fields
        assert any(field in error for error in said), field


def test_a_bug_in_the_middle_of_a_batch_of_ten_fails_that_record_alone(
    intake_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a batch of ten hook notifications of ten instances, the fifth of which intake fails on for a bug
    instances = [f"i-0000000000000000{index}" for index in range(10)]
    batch = sqs_event(
        *(
            hook_notification(EC2InstanceId=instance, LifecycleActionToken=str(uuid.uuid4()))
            for instance in instances
        )
    )
    accept = Intake.accept

    def buggy(self: Intake, event: LifecycleEvent) -> Any:
        if event.instance_id == instances[4]:
            raise KeyError("heartbeat_timeout")
        return accept(self, event)

    monkeypatch.setattr(Intake, "accept", buggy)

    # When intake takes the batch in
    response = intake_fn.handler(batch, LambdaContext())

    # Then that record alone fails (SQS delivers it again), the nine others are taken in, each with its first
    # step, and the failure is an ERROR naming the bug, logged under the record's message id
    assert response == {"batchItemFailures": [{"itemIdentifier": "message-4"}]}
    assert sorted(record["instance_id"] for record in records()) == instances[:4] + instances[5:]
    assert len(work(stack.drain_queue)) == 9
    failed = [line for line in log_lines(capsys.readouterr().out) if line.get("level") == "ERROR"]
    assert [line["message_id"] for line in failed] == ["message-4"]
    assert "KeyError" in failed[0]["exception"]


def test_every_sqs_source_of_the_template_reports_its_failed_records_alone() -> None:
    # Without ReportBatchItemFailures Lambda ignores a partial batch response: an invocation that returns one
    # succeeded, and SQS deletes every record of the batch, the failed ones too (never retried, never
    # dead-lettered). Every function's SQS source must declare it.
    template = load_template(ROOT / "template.yaml")
    sources = {
        (function, name): event.get("Properties") or {}
        for function, resource in template["Resources"].items()
        if resource.get("Type") == "AWS::Serverless::Function"
        for name, event in ((resource.get("Properties") or {}).get("Events") or {}).items()
        if event.get("Type") == "SQS"
    }
    assert ("IntakeFunction", "HookNotifications") in sources
    assert {
        key
        for key, properties in sources.items()
        if properties.get("FunctionResponseTypes") != ["ReportBatchItemFailures"]
    } == set()
