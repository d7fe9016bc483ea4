"""A function's log in process mode: what its containers print (Powertools' metrics and logger lines both go to
stdout) reaches the function's log file as Lambda's CloudWatch stream gets it: each line whole and as it is
written, though several containers of the function append to the one file."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import MakeRunner

TEMPLATE = """
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 5
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Timeout: 10
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            BatchSize: 1
            ScalingConfig: {MaximumConcurrency: 2}
"""

# Each line one JSON document of ~300 bytes, printed as Powertools prints an Embedded Metric Format document; the
# two invocations print theirs at once, 900 KB each (before the fix: lines broken by the other container's within
# this many, whether Python's stdout was unbuffered or block-buffered).
LINES = 3000
# Each invocation first waits (up to 8 s, within the function's 10 s timeout) until the other has begun, at the
# barrier directory: a container busy with one message cannot take the other, so the two are handled by two
# containers at once, whichever order the queue's poller receives them in (without it, one container could take both
# in turn when the first ended before the second was received, and the test would show no interleaving).
HANDLER = """
import json, os, time
from pathlib import Path
LINES = {lines}
BARRIER = Path({barrier!r})

def handler(event, context):
    body = event["Records"][0]["body"]
    (BARRIER / body).touch()
    waited = time.monotonic() + 8
    while len(list(BARRIER.iterdir())) < 2 and time.monotonic() < waited:
        time.sleep(0.05)
    for n in range(LINES):
        print(json.dumps({{"body": body, "n": n, "pid": os.getpid(), "pad": "x" * 250}}))
    return {{"pid": os.getpid()}}
"""


def test_each_printed_line_is_in_the_log_whole_once_its_invocation_returns(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a function of two containers at once, logging to one file
    barrier = tmp_path / "begun"
    barrier.mkdir()
    handler = HANDLER.format(lines=LINES, barrier=str(barrier))
    runner = make_runner(TEMPLATE, {"worker": handler}, mode="process", log_dir=tmp_path / "logs")

    # When two messages are handled at the same time, in two containers
    for body in ("a", "b"):
        runner.sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody=body)
    handled = runner.journal.wait_until(
        lambda: (
            [i for i in runner.journal.invocations("Worker") if i.ok][1:]
            and runner.journal.invocations("Worker")
        ),
        timeout=30,
    )
    assert len({i.response["pid"] for i in handled}) == 2, handled

    # Then, the containers still warm (nothing flushed by their exit), every line each printed is in the log,
    # whole, each a document of its own
    text = (tmp_path / "logs" / "Worker.log").read_text()
    printed = [json.loads(line) for line in text.splitlines() if line.startswith('{"body"')]
    assert sorted((p["body"], p["n"]) for p in printed) == [(b, n) for b in "ab" for n in range(LINES)]
