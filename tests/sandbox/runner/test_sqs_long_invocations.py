"""What Lambda's SQS mapping does with an invocation longer than its queue's visibility timeout, or than the
function's own timeout, as the sandbox's runner must do it: Lambda never extends a batch's visibility timeout, so a
message whose invocation outlasts it shows again and another poller delivers it to another container while the
first still runs; and a function timed out mid-batch fails the whole batch, the records it had done included."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import MakeRunner

TEMPLATE = """
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: VISIBILITY
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Timeout: TIMEOUT
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            BatchSize: 2
            MaximumBatchingWindowInSeconds: WINDOW
            FunctionResponseTypes: [ReportBatchItemFailures]
            ScalingConfig: {MaximumConcurrency: 2}
"""

# Each record: its body names a file to append its id to (done), then how long to take after it
HANDLER = """
import json, pathlib, time

def handler(event, context):
    for record in event["Records"]:
        body = json.loads(record["body"])
        with open(body["done"], "a") as done:
            done.write(record["messageId"] + "\\n")
        time.sleep(body["takes"])
    return {"batchItemFailures": []}
"""


def _template(visibility: int, timeout: int, window: int) -> str:
    return (
        TEMPLATE.replace("VISIBILITY", str(visibility))
        .replace("TIMEOUT", str(timeout))
        .replace("WINDOW", str(window))
    )


def test_a_message_whose_invocation_outlasts_its_visibility_runs_again_alongside(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a queue whose visibility timeout (1 s) is shorter than the function's run of a message (2 s)
    runner = make_runner(_template(visibility=1, timeout=10, window=0), {"worker": HANDLER}, mode="process")
    done = tmp_path / "done"

    # When one message arrives
    runner.sqs.send_message(
        QueueUrl=runner.queue("Work").url, MessageBody=json.dumps({"done": str(done), "takes": 2})
    )

    # Then a second poller delivers it again while the first invocation still runs it, to another container
    first, second = runner.journal.wait_until(
        lambda: (
            runner.journal.invocations("Worker")[:2]
            if len(runner.journal.invocations("Worker")) > 1
            else None
        ),
        timeout=20,
    )
    assert first.records == second.records
    assert second.started_at < first.finished_at
    counts = sorted(i.event["Records"][0]["attributes"]["ApproximateReceiveCount"] for i in (first, second))
    assert counts == ["1", "2"]


def test_a_function_timed_out_mid_batch_sends_the_whole_batch_back(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a function of a 1 s timeout whose batch of two takes 4 s (the first record done, then the time out)
    runner = make_runner(_template(visibility=2, timeout=1, window=1), {"worker": HANDLER}, mode="process")
    done = tmp_path / "done"
    # (sent in one call, so that both are in the queue for the mapping's first receive, however loaded the machine)
    body = json.dumps({"done": str(done), "takes": 2})
    runner.sqs.send_message_batch(
        QueueUrl=runner.queue("Work").url,
        Entries=[{"Id": str(n), "MessageBody": body} for n in range(2)],
    )

    # When the batch is invoked and times out
    first = runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=20)[0]

    # Then the invocation failed as Lambda's timeout, and every record of it comes back, the one it did as well
    assert not first.ok
    assert "timed out" in (first.error or "")
    assert len(first.records) == 2
    assert set(first.failures) == set(first.records)
    assert first.records[0] in done.read_text().split()  # (its first record was done before the timeout)

    def redelivered() -> set[str]:
        return {r for i in runner.journal.invocations("Worker")[1:] for r in i.records} & set(first.records)

    assert runner.journal.wait_until(
        lambda: redelivered() == set(first.records) and redelivered(), timeout=20
    )
