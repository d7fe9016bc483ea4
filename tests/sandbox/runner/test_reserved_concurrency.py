"""A function's reserved concurrency caps its executions across all its sources, and Lambda throttles beyond it:
an asynchronous event waits in Lambda's queue (not a retry attempt) until its maximum age; an SQS batch is tried
again while its messages are invisible, then shows again in the queue and counts a receive."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nodecycle_sandbox.runner import Runner

from .conftest import MakeRunner
from .test_stack_deployment import client

if TYPE_CHECKING:
    from mypy_boto3_sqs.type_defs import MessageTypeDef

TEMPLATE = """
Resources:
  Destination:
    Type: AWS::SQS::Queue
  WorkDlq:
    Type: AWS::SQS::Queue
  Work:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: VISIBILITY
      RedrivePolicy: {deadLetterTargetArn: !GetAtt WorkDlq.Arn, maxReceiveCount: 2}
  Intake:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/intake/
      Handler: app.handler
      Timeout: 30
      ReservedConcurrentExecutions: 1
      EventInvokeConfig:
        MaximumRetryAttempts: 0
        MaximumEventAgeInSeconds: 60
        DestinationConfig:
          OnFailure: {Type: SQS, Destination: !GetAtt Destination.Arn}
      Events:
        Lifecycle:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [aws.autoscaling]}
        Notifications:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            BatchSize: 1
"""

# Holds its execution while the file its event names exists (the test lets go by deleting it).
HANDLER = """
import json
import os
import pathlib
import time

def handler(event, context):
    detail = event["Records"][0]["body"] if "Records" in event else event["detail"]
    detail = json.loads(detail) if isinstance(detail, str) else detail
    if detail.get("hold"):
        pathlib.Path(detail["hold"] + ".started").touch()
        while os.path.exists(detail["hold"]):
            time.sleep(0.02)
    return detail["name"]
"""


def _runner(make_runner: MakeRunner, visibility: int = 30) -> Runner:
    template = TEMPLATE.replace("VISIBILITY", str(visibility))
    return make_runner(template, {"intake": HANDLER}, schedules_enabled=False)


def _publish(runner: Runner, name: str, hold: Path | None = None) -> None:
    detail = {"name": name, **({"hold": str(hold)} if hold else {})}
    runner.publish({"source": "aws.autoscaling", "detail-type": "x", "detail": detail})


def _hold_the_only_execution(runner: Runner, tmp_path: Path) -> Path:
    """An event whose invocation takes the function's one execution until the returned file is deleted."""
    hold = tmp_path / "hold"
    hold.touch()
    _publish(runner, "holder", hold)
    runner.journal.wait_until(lambda: Path(f"{hold}.started").exists(), timeout=10)
    return hold


def _receive(runner: Runner, queue: str) -> list[MessageTypeDef]:
    answer = runner.sqs.receive_message(QueueUrl=runner.queue(queue).url, MaxNumberOfMessages=10)
    return answer.get("Messages", [])


def test_an_event_beyond_the_reserved_concurrency_waits_and_runs_without_using_a_retry(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a function of reserved concurrency 1, no retry attempts, and an event holding its execution
    runner = _runner(make_runner)
    hold = _hold_the_only_execution(runner, tmp_path)

    # When another event arrives, and the first lets go after it was throttled
    _publish(runner, "second")
    runner.journal.wait_until(lambda: runner.journal.throttles("Intake"), timeout=10)
    hold.unlink()

    # Then the second runs once, as its first attempt: the throttles were not retries
    runner.journal.wait_until(lambda: len(runner.journal.invocations("Intake")) == 2, timeout=10)
    second = [i for i in runner.journal.invocations("Intake") if i.response == "second"]
    assert [(i.ok, i.attempt) for i in second] == [(True, 1)]
    assert {t.outcome for t in runner.journal.throttles("Intake")} == {"retry"}
    assert {t.source for t in runner.journal.throttles("Intake")} == {"rule:Lifecycle"}


def test_an_event_throttled_past_its_maximum_age_goes_to_the_failure_destination_unrun(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a function whose events live 60 s (1 s in the sandbox), its one execution held
    runner = _runner(make_runner)
    hold = _hold_the_only_execution(runner, tmp_path)

    # When another event stays throttled longer than that
    _publish(runner, "too-late")
    runner.journal.wait_until(
        lambda: any(t.outcome == "expired" for t in runner.journal.throttles("Intake")), timeout=10
    )
    hold.unlink()

    # Then it goes to the on-failure destination as EventAgeExceeded, never having run
    (record,) = runner.journal.wait_until(lambda: _receive(runner, "Destination"), timeout=10)
    body = json.loads(record["Body"])
    assert body["requestContext"]["condition"] == "EventAgeExceeded"
    assert body["requestContext"]["approximateInvokeCount"] == 0
    assert body["requestPayload"]["detail"] == {"name": "too-late"}
    runner.journal.wait_until(lambda: runner.journal.invocations("Intake"), timeout=10)
    assert [i.response for i in runner.journal.invocations("Intake")] == ["holder"]


def test_a_throttled_batch_is_tried_again_while_its_messages_are_invisible(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given the function's one execution held by an event, and a queue whose visibility timeout is 30 s
    runner = _runner(make_runner, visibility=30)
    hold = _hold_the_only_execution(runner, tmp_path)

    # When a message arrives on its queue, is throttled, and the execution is then freed
    runner.sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody=json.dumps({"name": "queued"}))
    runner.journal.wait_until(lambda: runner.journal.throttles("Intake", "sqs:Work"), timeout=10)
    hold.unlink()

    # Then the same receive of the message runs it: no receive counted towards the dead-letter queue
    (invocation,) = runner.journal.wait_until(
        lambda: runner.journal.invocations("Intake", "sqs:Work"), timeout=10
    )
    assert (invocation.ok, invocation.response) == (True, "queued")
    assert invocation.event["Records"][0]["attributes"]["ApproximateReceiveCount"] == "1"
    assert {t.outcome for t in runner.journal.throttles("Intake", "sqs:Work")} == {"retry"}


def test_a_batch_throttled_past_its_visibility_timeout_comes_back_and_can_reach_the_dead_letter_queue(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given the function's one execution held by an event, and a 1 s visibility timeout, maxReceiveCount 2
    runner = _runner(make_runner, visibility=1)
    hold = _hold_the_only_execution(runner, tmp_path)

    # When a message arrives on its queue while the execution stays held
    runner.sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody=json.dumps({"name": "queued"}))
    dead = runner.journal.wait_until(lambda: _receive(runner, "WorkDlq"), timeout=15)
    hold.unlink()

    # Then it was let go at each visibility timeout, counted its receives, and went to the dead-letter queue
    # without the function ever running it
    assert [json.loads(m["Body"]) for m in dead] == [{"name": "queued"}]
    returned = [t for t in runner.journal.throttles("Intake", "sqs:Work") if t.outcome == "returned"]
    assert len(returned) == 2
    assert {t.records for t in returned} == {(dead[0]["MessageId"],)}
    assert runner.journal.invocations("Intake", "sqs:Work") == []


def test_the_template_s_reserved_concurrency_and_event_age_are_read(make_runner: MakeRunner) -> None:
    # Given the function above, When the runner reads it, Then it knows its reserved concurrency and event age
    spec = _runner(make_runner).functions["Intake"]
    assert (spec.reserved_concurrency, spec.max_event_age) == (1, 60.0)


def test_an_event_for_a_function_stopped_at_zero_goes_to_its_failure_targets_at_once_unrun(
    make_runner: MakeRunner,
) -> None:
    # Given the function stopped by the runbook's kill switch (reserved concurrency 0, by hand), its events
    # living 6 hours (6 minutes in the sandbox), a dead-letter queue and an on-failure destination
    template = (
        TEMPLATE.replace("VISIBILITY", "30")
        .replace("MaximumEventAgeInSeconds: 60", "MaximumEventAgeInSeconds: 21600")
        .replace(
            "      EventInvokeConfig:",
            "      DeadLetterQueue: {Type: SQS, TargetArn: !GetAtt WorkDlq.Arn}\n      EventInvokeConfig:",
        )
    )
    runner = make_runner(template, {"intake": HANDLER}, schedules_enabled=False)
    lambda_ = client(runner, "lambda")
    name = runner.functions["Intake"].name
    lambda_.put_function_concurrency(FunctionName=name, ReservedConcurrentExecutions=0)
    time.sleep(1.2)  # (Lambda applies it within seconds; the runner reads it again each second)

    # When an event comes
    _publish(runner, "stopped")

    # Then Lambda sends it to both at once (not after its maximum age), never having run it: the on-failure
    # record's condition ZeroReservedConcurrency, with no response (none was asked for), the dead letter
    # without an error code
    (record,) = runner.journal.wait_until(lambda: _receive(runner, "Destination"), timeout=10)
    body = json.loads(record["Body"])
    assert body["requestContext"]["condition"] == "ZeroReservedConcurrency"
    assert body["requestContext"]["approximateInvokeCount"] == 0
    assert body["requestPayload"]["detail"] == {"name": "stopped"}
    assert "responseContext" not in body
    assert "responsePayload" not in body
    dead = runner.sqs.receive_message(
        QueueUrl=runner.queue("WorkDlq").url, MessageAttributeNames=["All"], WaitTimeSeconds=5
    )["Messages"]
    assert [json.loads(m["Body"])["detail"] for m in dead] == [{"name": "stopped"}]
    assert set(dead[0]["MessageAttributes"]) == {"RequestID", "ErrorMessage"}
    assert {t.outcome for t in runner.journal.throttles("Intake")} == {"ZeroReservedConcurrency"}

    # and its concurrency given back, the event is not run late: it is in the failure targets alone
    lambda_.delete_function_concurrency(FunctionName=name)
    time.sleep(1.2)
    _publish(runner, "after")
    runner.journal.wait_until(lambda: runner.journal.invocations("Intake"), timeout=10)
    assert [i.response for i in runner.journal.invocations("Intake")] == ["after"]


def test_a_queue_of_a_function_stopped_at_zero_is_still_polled_and_its_throttled_messages_dead_lettered(
    make_runner: MakeRunner,
) -> None:
    # Lambda: "Event source mappings don't account for reserved concurrency and can process more messages off your
    # queue than can be sent to your function" (knowledge-center/lambda-sqs-scaling). A function stopped by hand
    # at 0 is throttled at every batch its pollers take; each take counts a receive, and maxReceiveCount sends the
    # message to the dead-letter queue unrun: the harsher reading, which the product's repairs must survive (the
    # sweeper resumes the lifecycle; the dead-letter alarm pages).
    # Given the function stopped (reserved concurrency 0), its queue's visibility timeout 1 s, maxReceiveCount 2
    runner = _runner(make_runner, visibility=1)
    lambda_ = client(runner, "lambda")
    lambda_.put_function_concurrency(
        FunctionName=runner.functions["Intake"].name, ReservedConcurrentExecutions=0
    )
    time.sleep(1.2)  # (Lambda applies it within seconds; the runner reads it again each second)

    # When a message arrives on its queue
    runner.sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody=json.dumps({"name": "stopped"}))
    dead = runner.journal.wait_until(lambda: _receive(runner, "WorkDlq"), timeout=15)

    # Then it was taken and throttled at each receive, and went to the dead-letter queue never run
    assert [json.loads(m["Body"]) for m in dead] == [{"name": "stopped"}]
    assert runner.journal.throttles("Intake", "sqs:Work")
    assert runner.journal.invocations("Intake", "sqs:Work") == []
