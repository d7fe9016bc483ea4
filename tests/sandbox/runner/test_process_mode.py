"""Process mode: warm worker processes per function, a concurrency limit, crashes and timeouts."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

from nodecycle_sandbox.runner.invokers import InvocationResult

from .conftest import MakeRunner

TEMPLATE = """
Globals:
  Function:
    Timeout: 2
    MemorySize: 256
    Environment:
      Variables:
        GREETING: hello
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 1
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
            BatchSize: 1
            ScalingConfig: {MaximumConcurrency: 2}
"""

HANDLER = """
import os, time, boto3

def handler(event, context):
    body = event["Records"][0]["body"]
    marker = os.path.join(os.environ["LAMBDA_TASK_ROOT"], body + ".seen")
    first_time = not os.path.exists(marker)
    open(marker, "w").close()
    if body == "crash" and first_time:
        os._exit(3)
    if body == "slow" and first_time:
        time.sleep(5)
    if body.startswith("sleep"):
        time.sleep(0.5)
    boto3.client("sqs").list_queues()
    return {
        "pid": os.getpid(),
        "greeting": os.environ["GREETING"],
        "function": context.function_name,
        "memory": context.memory_limit_in_mb,
        "remaining": context.get_remaining_time_in_millis(),
    }
"""


def _send(runner, *bodies: str) -> None:
    for body in bodies:
        runner.sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody=body)


def _ok_bodies(runner) -> list[str]:
    return [i.event["Records"][0]["body"] for i in runner.journal.invocations("Worker") if i.ok]


def test_no_more_invocations_run_at_once_than_the_maximum_concurrency(make_runner: MakeRunner) -> None:
    # Given MaximumConcurrency 2 and a handler that takes half a second
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process")

    # When six messages arrive at once
    _send(runner, *[f"sleep{n}" for n in range(6)])
    runner.journal.wait_until(lambda: len(_ok_bodies(runner)) == 6, timeout=15)

    # Then at most two ran at any moment, in at most two warm workers
    invocations = runner.journal.invocations("Worker")
    edges = sorted([(i.started_at, 1) for i in invocations] + [(i.finished_at, -1) for i in invocations])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert peak == 2
    assert len({i.response["pid"] for i in invocations}) == 2
    assert sum(i.cold_start for i in invocations) == 2


def test_a_worker_sees_its_environment_context_and_has_its_aws_calls_counted(make_runner: MakeRunner) -> None:
    # Given a worker
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process")

    # When it handles a message
    _send(runner, "hi")
    (invocation,) = runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=10)

    # Then it saw the template's environment and a Lambda-like context, and its SQS call was counted
    assert invocation.response["greeting"] == "hello"
    assert (invocation.response["function"], invocation.response["memory"]) == ("t-Worker", 256)
    assert 0 < invocation.response["remaining"] <= 2000
    assert invocation.api_calls == {"sqs.ListQueues": 1}
    assert runner.journal.api_calls("Worker") == {"sqs.ListQueues": 1}


def test_a_crashed_worker_fails_its_batch_and_is_replaced(make_runner: MakeRunner) -> None:
    # Given a handler whose process dies on the first "crash", in a container already warm: the crash comes
    # at once, well within the queue's one-second visibility timeout (a cold start longer than that, on a
    # loaded machine, would have the message delivered again to a second container while the first still
    # started, and the redelivery would not need a replacement)
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process")
    assert runner.warm("Worker", 1) == 1

    # When "crash" arrives
    _send(runner, "crash")

    # Then the invocation fails like a crashed container, and the redelivery succeeds in a new one
    runner.journal.wait_until(lambda: "crash" in _ok_bodies(runner), timeout=10)
    failed, succeeded = runner.journal.invocations("Worker")
    assert not failed.ok
    assert (failed.error or "").startswith("Runtime.ExitError")
    assert not failed.cold_start
    assert succeeded.cold_start


def test_an_invocation_that_overruns_its_timeout_is_stopped(make_runner: MakeRunner) -> None:
    # Given a two-second timeout and a handler that sleeps five seconds the first time
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process")

    # When "slow" arrives
    _send(runner, "slow")

    # Then the invocation times out after two seconds and the message is handled again
    runner.journal.wait_until(lambda: "slow" in _ok_bodies(runner), timeout=12)
    timed_out = runner.journal.wait_until(
        lambda: [i for i in runner.journal.invocations("Worker") if not i.ok], timeout=5
    )[0]
    assert timed_out.error == "Sandbox.Timedout: Task timed out after 2.00 seconds"
    assert 1.9 < timed_out.duration < 3.5


# (a mapping's MaximumConcurrency is at least 2 on Lambda: one slot is the function's reserved concurrency)
ONE_SLOT = TEMPLATE.replace(
    "      Handler: app.handler\n", "      Handler: app.handler\n      ReservedConcurrentExecutions: 1\n", 1
)


def test_a_worker_killed_while_idle_is_replaced_and_its_slot_is_not_lost(make_runner: MakeRunner) -> None:
    # Given a function with one concurrency slot, whose warm worker is then killed while idle (its pipe broken)
    runner = make_runner(ONE_SLOT, {"worker": HANDLER}, mode="process", sqs_sources_enabled=False)
    first = runner.invoke("Worker", {"Records": [{"body": "hi"}]})
    assert first.ok
    os.kill(first.response["pid"], signal.SIGKILL)
    _wait_dead(first.response["pid"])

    # When the next two invocations come (each in its own thread, so a stuck pool cannot hang the test)
    results: list[object] = []

    def invoke(body: str) -> None:
        try:
            results.append(runner.invoke("Worker", {"Records": [{"body": body}]}))
        except Exception as error:  # what the poller would have seen
            results.append(error)

    for body in ("after-kill", "again"):
        thread = threading.Thread(target=invoke, args=(body,), daemon=True)
        thread.start()
        thread.join(timeout=15)
        assert not thread.is_alive(), "the invocation never started: the pool lost its only slot"

    # Then the one on the dead container fails as a crashed container does, and the next runs in a new one
    dead, fresh = results
    assert isinstance(dead, InvocationResult)
    assert not dead.ok
    assert (dead.error_type or "") == "Runtime.ExitError"
    assert isinstance(fresh, InvocationResult)
    assert fresh.ok
    assert fresh.cold_start
    assert fresh.response["pid"] != first.response["pid"]


def _wait_dead(pid: int) -> None:
    """Until the killed process is gone (its end of the pipe closed): a zombie, or already reaped by the
    zygote it was forked from."""
    deadline = time.monotonic() + 5
    while (stat := Path(f"/proc/{pid}/stat")).exists():
        # Reaped between the look and the read: the open finds no file, or the read no process (ESRCH)
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            if stat.read_text().split(")")[-1].split()[0] == "Z":
                return
        assert time.monotonic() < deadline, f"process {pid} did not die"
        time.sleep(0.01)


def test_containers_started_ahead_take_the_invocations_warm(make_runner: MakeRunner) -> None:
    # Given a worker function whose two containers are started before any message
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process")
    assert runner.warm("Worker") == 2
    assert runner.warm("Worker") == 0  # already there: none more (the concurrency is 2)

    # When messages arrive
    _send(runner, *[f"sleep{n}" for n in range(4)])
    runner.journal.wait_until(lambda: len(_ok_bodies(runner)) == 4, timeout=15)

    # Then no invocation was a cold start, and only those two containers ran them
    invocations = runner.journal.invocations("Worker")
    assert not any(i.cold_start for i in invocations)
    assert len({i.response["pid"] for i in invocations}) == 2


def test_recycled_containers_are_replaced_by_new_ones(make_runner: MakeRunner) -> None:
    # Given a worker function that handled a message in a warm container
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process")
    _send(runner, "first")
    (before,) = runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=10)

    # When its idle containers are recycled and another message comes
    runner.recycle("Worker")
    _send(runner, "second")
    runner.journal.wait_until(lambda: len(_ok_bodies(runner)) == 2, timeout=10)

    # Then a new container (a cold start) handles it
    after = runner.journal.invocations("Worker")[-1]
    assert after.cold_start
    assert after.response["pid"] != before.response["pid"]
