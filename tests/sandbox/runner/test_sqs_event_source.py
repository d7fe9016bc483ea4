"""SQS event source mappings: batches, partial batch failures, whole-batch failures, delays, dead letters."""

from __future__ import annotations

import logging
import time

import pytest

from .conftest import MakeRunner

TEMPLATE = """
Resources:
  WorkDlq:
    Type: AWS::SQS::Queue
  Work:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 1
      RedrivePolicy: {deadLetterTargetArn: !GetAtt WorkDlq.Arn, maxReceiveCount: 2}
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            BatchSize: 3
            FunctionResponseTypes: [ReportBatchItemFailures]
"""

HANDLER = """
def handler(event, context):
    bodies = {r["messageId"]: r["body"] for r in event["Records"]}
    if "boom" in bodies.values():
        raise RuntimeError("boom")
    return {"batchItemFailures": [{"itemIdentifier": i} for i, b in bodies.items() if b == "bad"]}
"""


def _send(runner, *bodies: str, delay: int = 0) -> None:
    for body in bodies:
        runner.sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody=body, DelaySeconds=delay)


def _dead_letters(runner) -> list[str]:
    answer = runner.sqs.receive_message(QueueUrl=runner.queue("WorkDlq").url, MaxNumberOfMessages=10)
    return [m["Body"] for m in answer.get("Messages", [])]


def test_reported_failures_come_back_and_end_in_the_dead_letter_queue(make_runner: MakeRunner) -> None:
    # Given a handler that reports "bad" records as failed
    runner = make_runner(TEMPLATE, {"worker": HANDLER})

    # When a good and a bad message arrive
    _send(runner, "good", "bad")

    # Then the bad one is delivered maxReceiveCount times, then moves to the dead-letter queue
    dead = runner.journal.wait_until(lambda: _dead_letters(runner), timeout=8)
    assert dead == ["bad"]
    deliveries = [r["body"] for i in runner.journal.invocations("Worker") for r in i.event["Records"]]
    assert deliveries.count("good") == 1
    assert deliveries.count("bad") == 2
    bad_invocations = [i for i in runner.journal.invocations("Worker") if i.failures]
    assert all(i.ok and len(i.failures) == 1 for i in bad_invocations)


def test_a_handler_exception_fails_the_whole_batch(make_runner: MakeRunner) -> None:
    # Given a handler that raises when a batch holds "boom", and a batching window that gathers batches
    template = TEMPLATE.replace("BatchSize: 3", "BatchSize: 2\n            MaximumBatchingWindowInSeconds: 1")
    runner = make_runner(template, {"worker": HANDLER})

    # When "boom" and "fine" arrive together
    _send(runner, "fine", "boom")
    first = runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=5)[0]

    # Then every record of the batch comes back after the visibility timeout
    assert not first.ok
    assert "RuntimeError: boom" in (first.error or "")
    assert set(first.failures) == set(first.records)
    redelivered = runner.journal.wait_until(lambda: runner.journal.invocations("Worker")[1:], timeout=5)
    assert set(first.records) <= {r for i in redelivered for r in i.records}


def test_batches_never_exceed_the_batch_size(make_runner: MakeRunner) -> None:
    # Given batch size 3
    runner = make_runner(TEMPLATE, {"worker": HANDLER})

    # When seven messages arrive
    _send(runner, *[f"m{n}" for n in range(7)])

    # Then they are all delivered, at most three at a time
    runner.journal.wait_until(
        lambda: sum(len(i.records) for i in runner.journal.invocations("Worker")) == 7, timeout=5
    )
    assert max(len(i.records) for i in runner.journal.invocations("Worker")) <= 3


def test_messages_reach_the_handler_at_once_or_at_their_due_time(make_runner: MakeRunner) -> None:
    # Given a running event source
    runner = make_runner(TEMPLATE, {"worker": HANDLER})

    # When a message is sent without delay, and one with a two-second delay
    _send(runner, "now")
    sent = time.time()
    _send(runner, "later", delay=2)

    # Then the first reaches its handler before the second is due, and the second not before its due time
    # (orderings, not durations: a loaded machine may be late, never early; both from the second send, the
    # first send's own time left out: a first send that took 2 s, as under load, failed it)
    runner.journal.wait_until(lambda: len(runner.journal.invocations("Worker")) == 2, timeout=10)
    started = {
        i.event["Records"][0]["body"]: i.started_at - sent for i in runner.journal.invocations("Worker")
    }
    assert (
        started["now"] < 2.0 <= started["later"] + 0.05
    )  # (the queue's clock and ours: 50 ms apart at most)


def test_the_sqs_event_has_lambdas_shape(make_runner: MakeRunner) -> None:
    # Given a handler
    runner = make_runner(TEMPLATE, {"worker": HANDLER})

    # When a message arrives
    _send(runner, "shape")

    # Then the record carries Lambda's fields
    (invocation,) = runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=5)
    (record,) = invocation.event["Records"]
    assert set(record) >= {
        "messageId",
        "receiptHandle",
        "body",
        "attributes",
        "messageAttributes",
        "md5OfBody",
        "eventSource",
        "eventSourceARN",
        "awsRegion",
    }
    assert set(record["attributes"]) >= {
        "ApproximateReceiveCount",
        "SentTimestamp",
        "SenderId",
        "ApproximateFirstReceiveTimestamp",
    }
    assert (record["eventSource"], record["eventSourceARN"]) == ("aws:sqs", runner.queue("Work").arn)


MANY_POLLERS = """
Resources:
  Work:
    Type: AWS::SQS::Queue
  Other:
    Type: AWS::SQS::Queue
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            ScalingConfig: {MaximumConcurrency: 8}
        Other:
          Type: SQS
          Properties:
            Queue: !GetAtt Other.Arn
            ScalingConfig: {MaximumConcurrency: 8}
"""


def test_pollers_reading_lambda_at_once_discard_no_connection(
    make_runner: MakeRunner, caplog: pytest.LogCaptureFixture
) -> None:
    # Given more pollers than botocore's default pool of ten (two mappings of eight), each asking Lambda for its
    # function's reserved concurrency and its mapping's state every second
    caplog.set_level(logging.WARNING, logger="urllib3.connectionpool")
    make_runner(MANY_POLLERS, {"worker": "def handler(event, context):\n    return None\n"}, mode="process")

    # When they poll a few seconds (several rounds of answers due again at once)
    time.sleep(5)

    # Then no connection was discarded for a full pool (before: 2-4 "Connection pool is full" lines a run)
    assert [r.getMessage() for r in caplog.records if "Connection pool is full" in r.getMessage()] == []


@pytest.mark.parametrize(
    "batching", ["BatchSize: 20", "BatchSize: 20\n            MaximumBatchingWindowInSeconds: 0"]
)
def test_a_batch_over_ten_without_a_batching_window_is_refused_as_lambda_refuses_it(
    make_runner: MakeRunner, batching: str
) -> None:
    # Given a mapping of more than ten messages a batch and no batching window (Lambda's CreateEventSourceMapping:
    # InvalidParameterValueException, the stack rolled back), When it is deployed, Then it is refused
    with pytest.raises(ValueError, match="Maximum batch window in seconds must be greater than 0"):
        make_runner(TEMPLATE.replace("BatchSize: 3", batching), {"worker": HANDLER})
