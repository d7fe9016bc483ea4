"""Stopping a runner: the invocations in flight finish; with the AWS side going away next (the sandbox's stop),
the pollers' long polls are not waited for; containers exit at once, as Lambda shuts one down, their exit
handlers run."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest
from botocore.exceptions import EndpointConnectionError

from nodecycle_sandbox.runner import Runner

from .conftest import MakeRunner

TEMPLATE = """
Resources:
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Timeout: 5
"""

# Writes what ran of its process's exit: its exit handlers (coverage saves its data in one), and the teardown of
# its modules (a second of CPU for a container's libraries, which nothing needs).
HANDLER = """
import atexit, os

EXIT_LOG = os.path.join(os.environ["LAMBDA_TASK_ROOT"], "exit.log")


def _note(what, _open=open, _path=EXIT_LOG):  # (bound now: a module being torn down has lost its globals)
    with _open(_path, "a") as log:
        log.write(what + "\\n")


atexit.register(_note, "exit handlers")


class _TornDown:
    def __del__(self, _note=_note):
        _note("modules torn down")


witness = _TornDown()


def handler(event, context):
    return os.getpid()
"""


def test_a_stopped_container_runs_its_exit_handlers_and_skips_tearing_its_modules_down(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a container that has handled an invocation
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process")
    assert runner.invoke("Worker", {}).ok

    # When the runner stops
    runner.stop()

    # Then the container ran its exit handlers, and exited without tearing its modules down
    assert (tmp_path / "functions" / "worker" / "exit.log").read_text().splitlines() == ["exit handlers"]


POLLED = """
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 30
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
"""

# Says when it has started (a file), then waits for the test's word (another file) before it returns.
SLOW = """
import os, time

def handler(event, context):
    root = os.environ["LAMBDA_TASK_ROOT"]
    body = event["Records"][0]["body"]
    open(os.path.join(root, body + ".started"), "w").close()
    deadline = time.monotonic() + 8
    while not os.path.exists(os.path.join(root, "go")) and time.monotonic() < deadline:
        time.sleep(0.02)
    return body
"""


def _poller_in_its_long_poll(runner: Runner) -> threading.Thread:
    """The function's one poller, once it is in a receive (in botocore's call: it stays there for the whole
    long poll, whatever happens meanwhile)."""
    (poller,) = [t for t in threading.enumerate() if t.name.startswith("Worker-Work-")]
    deadline = time.monotonic() + 10
    while True:
        frame = sys._current_frames().get(poller.ident or 0)
        names = set()
        while frame is not None:
            names.add(frame.f_code.co_name)
            frame = frame.f_back
        if {"_receive", "_make_api_call"} <= names:
            return poller
        assert time.monotonic() < deadline, "the poller never started its long poll"
        time.sleep(0.01)


def _wait_for_file(path: Path, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def test_a_stop_before_the_aws_side_goes_leaves_the_long_poll_and_delivers_nothing_it_brings(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a runner whose poller is in a 20 s long poll of an empty queue
    runner = make_runner(POLLED, {"worker": SLOW}, poll_wait=20)
    poller = _poller_in_its_long_poll(runner)

    # When it stops with the AWS side going next
    runner.stop(aws_going=True)

    # Then the stop did not wait for the long poll, and a message it brings then is not delivered
    assert poller.is_alive()
    runner.sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody="late")
    poller.join(timeout=15)
    assert not poller.is_alive()
    assert runner.journal.invocations("Worker") == []
    assert not (tmp_path / "functions" / "worker" / "late.started").exists()


def test_an_invocation_in_flight_at_a_stop_before_the_aws_side_goes_finishes_and_its_message_is_deleted(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a runner whose poller is in an invocation
    runner = make_runner(POLLED, {"worker": SLOW}, poll_wait=1)
    url = runner.queue("Work").url
    runner.sqs.send_message(QueueUrl=url, MessageBody="busy")
    code = tmp_path / "functions" / "worker"
    _wait_for_file(code / "busy.started")

    # When it stops with the AWS side going next, and the invocation ends meanwhile
    releaser = threading.Timer(0.5, (code / "go").touch)
    releaser.start()
    runner.stop(aws_going=True)
    releaser.join()

    # Then the stop waited for it: the invocation is in the journal, and its message was deleted
    (invocation,) = runner.journal.invocations("Worker")
    assert invocation.ok
    attributes = runner.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (
        attributes["ApproximateNumberOfMessages"],
        attributes["ApproximateNumberOfMessagesNotVisible"],
    ) == (
        "0",
        "0",
    )


def test_a_poller_still_starting_when_the_aws_side_goes_ends_quietly(
    make_runner: MakeRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a poller still reading its queue's attributes (its mapping starting) when the runner stops
    entered, released = threading.Event(), threading.Event()

    def starting(runner: Runner, spec: object, trigger: object) -> object:
        entered.set()
        released.wait(10)
        raise EndpointConnectionError(endpoint_url=runner.endpoint_url)  # the AWS side is gone by then

    monkeypatch.setattr(Runner, "_mapping_client", starting)
    failures: list[threading.ExceptHookArgs] = []
    monkeypatch.setattr(threading, "excepthook", failures.append)
    runner = make_runner(POLLED, {"worker": SLOW})
    assert entered.wait(10)
    (poller,) = [t for t in threading.enumerate() if t.name.startswith("Worker-Work-")]

    # When the runner stops with the AWS side going next, and the poller's call fails as it goes
    runner.stop(aws_going=True)
    released.set()
    poller.join(timeout=10)

    # Then the poller ended without an unhandled error
    assert not poller.is_alive()
    assert [f.exc_value for f in failures] == []


@pytest.mark.parametrize("stopping", ["the runner", "the function's sources"])
def test_a_stop_with_the_aws_side_staying_ends_the_long_poll_rather_than_waiting_it_out(
    make_runner: MakeRunner, stopping: str
) -> None:
    # Given a runner whose poller is in a 20 s long poll of an empty queue (Lambda's long poll)
    runner = make_runner(POLLED, {"worker": SLOW}, poll_wait=20)
    poller = _poller_in_its_long_poll(runner)

    # When the runner stops, or stops the function's sources (a test stalling its queue), the AWS side staying
    stop = runner.stop if stopping == "the runner" else lambda: runner.set_sources_enabled("Worker", False)
    stopper = threading.Thread(target=stop, daemon=True)
    stopper.start()

    # Then the long poll is ended, well before its 20 s (before: the stop waited the long poll out), and a message
    # sent then stays in the queue
    poller.join(timeout=10)
    assert not poller.is_alive()
    stopper.join(timeout=10)
    assert not stopper.is_alive()
    url = runner.queue("Work").url
    runner.sqs.send_message(QueueUrl=url, MessageBody="late")
    attributes = runner.sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"]
    assert (
        attributes["ApproximateNumberOfMessages"],
        attributes["ApproximateNumberOfMessagesNotVisible"],
    ) == (
        "1",
        "0",
    )
    assert runner.journal.invocations("Worker") == []
