"""Lambda's side failing on purpose: containers killed after an API call, clocks moved, SQS deliveries
dropped, duplicated, delayed and reordered, EventBridge's events invoked twice or late."""

from __future__ import annotations

import functools
import time
from pathlib import Path

from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.runner import Runner

from .conftest import MakeRunner

TEMPLATE = """
Resources:
  Work:
    Type: AWS::SQS::Queue
    Properties:
      VisibilityTimeout: 1
  Out:
    Type: AWS::SQS::Queue
  Worker:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/worker/
      Handler: app.handler
      Timeout: 10
      Environment:
        Variables:
          OUT: !Ref Out
      Events:
        Work:
          Type: SQS
          Properties:
            Queue: !GetAtt Work.Arn
            BatchSize: 1
            # (Lambda's least; the tests run one poller, `ONE_POLLER`, unless they want two)
            ScalingConfig: {MaximumConcurrency: 2}
"""
# One poller of the mapping, as an account's concurrency would allow (MaximumConcurrency is at least 2)
ONE_POLLER = 1

HANDLER = """
import os, time, datetime, boto3

def handler(event, context):
    sqs = boto3.client("sqs")
    sqs.send_message(QueueUrl=os.environ["OUT"], MessageBody=event["Records"][0]["body"])
    sqs.list_queues()
    return {
        "time": time.time(),
        "now": datetime.datetime.now(datetime.UTC).timestamp(),
        "monotonic": time.monotonic(),
    }
"""


def _out(runner: Runner) -> list[str]:
    bodies: list[str] = []
    while True:
        got = runner.sqs.receive_message(QueueUrl=runner.queue("Out").url, MaxNumberOfMessages=10)
        if not got.get("Messages"):
            return bodies
        bodies += [m["Body"] for m in got["Messages"]]
        for m in got["Messages"]:
            runner.sqs.delete_message(QueueUrl=runner.queue("Out").url, ReceiptHandle=m["ReceiptHandle"])


def _handled(runner: Runner, body: str) -> bool:
    return any(i.ok and i.event["Records"][0]["body"] == body for i in runner.journal.invocations())


def _send(runner: Runner, body: str) -> None:
    runner.sqs.send_message(QueueUrl=runner.queue("Work").url, MessageBody=body)


def test_a_container_killed_after_its_first_call_leaves_that_call_done_and_the_message_redelivered(
    make_runner: MakeRunner,
) -> None:
    # Given the worker's container dies right after its first API call, once
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process", concurrency_cap=ONE_POLLER)
    runner.faults.arm([Fault("k", "worker-kill", target="Worker", limit=1, value=1)], seed=1)

    # When a message arrives
    _send(runner, "m1")
    runner.journal.wait_until(lambda: any(i.ok for i in runner.journal.invocations("Worker")), timeout=20)

    # Then the first invocation died as a killed container, after its send went through; the message came
    # back and was handled again in a new container: the side effect happened twice, as it would on AWS
    failed, handled = runner.journal.invocations("Worker")
    assert (failed.error or "").startswith("Runtime.ExitError")
    assert handled.ok
    assert handled.cold_start
    assert _out(runner) == ["m1", "m1"]
    assert runner.faults.counts() == {"worker-kill": 1}


def test_a_moved_clock_shifts_the_wall_clock_of_the_invocation_only(make_runner: MakeRunner) -> None:
    # Given invocations whose container clock is an hour ahead, for the first one only
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process", concurrency_cap=ONE_POLLER)
    runner.faults.arm([Fault("s", "clock-skew", target="Worker", limit=1, value=3600)], seed=1)

    # When two messages are handled
    for body in ("ahead", "on-time"):
        _send(runner, body)
        runner.journal.wait_until(
            functools.partial(_handled, runner, body),
            timeout=15,
        )

    # Then time.time and datetime.now were an hour ahead in the first, and right in the second
    first, second = (i.response for i in runner.journal.invocations("Worker"))
    now = time.time()
    assert 3500 < first["time"] - now < 3700
    assert 3500 < first["now"] - now < 3700
    assert abs(second["time"] - now) < 60
    assert abs(second["now"] - now) < 60


def test_dropped_messages_are_never_delivered_and_duplicated_ones_twice(make_runner: MakeRunner) -> None:
    # Given the first message received is lost, and the next batch is delivered twice
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process", concurrency_cap=ONE_POLLER)
    runner.faults.arm(
        [Fault("d", "sqs-drop", target="Work", limit=1), Fault("u", "sqs-duplicate", target="Work", limit=1)],
        seed=1,
    )

    # When two messages are sent, one after the other
    _send(runner, "lost")
    runner.journal.wait_until(lambda: runner.faults.counts().get("sqs-drop"), timeout=10)
    _send(runner, "twice")
    runner.journal.wait_until(lambda: len(runner.journal.invocations("Worker")) == 2, timeout=10)

    # Then the lost one was never handled, the other one twice
    assert [i.event["Records"][0]["body"] for i in runner.journal.invocations("Worker")] == ["twice", "twice"]
    assert runner.faults.counts() == {"sqs-drop": 1, "sqs-duplicate": 1}


def test_a_duplicate_is_a_receive_of_its_own_and_its_failure_brings_the_message_back(
    make_runner: MakeRunner,
) -> None:
    # Given a batch delivered twice, to a handler that fails the second receive of a message
    failing = HANDLER.replace(
        "    sqs = boto3.client",
        '    if event["Records"][0]["attributes"]["ApproximateReceiveCount"] == "2":\n'
        '        raise RuntimeError("second receive")\n'
        "    sqs = boto3.client",
    )
    runner = make_runner(TEMPLATE, {"worker": failing}, mode="process", concurrency_cap=ONE_POLLER)
    runner.faults.arm([Fault("u", "sqs-duplicate", target="Work", limit=1)], seed=1)

    # When a message is sent
    _send(runner, "twice")
    runner.journal.wait_until(lambda: len(runner.journal.invocations("Worker")) == 3, timeout=15)

    # Then the duplicate came with a handle of its own and its receive counted, and the first delivery's delete
    # (by the older handle) left the message to it: failed, it came back after its visibility timeout, as on SQS
    records = [i.event["Records"][0] for i in runner.journal.invocations("Worker")]
    assert [r["attributes"]["ApproximateReceiveCount"] for r in records] == ["1", "2", "3"]
    assert len({r["receiptHandle"] for r in records}) == 3
    assert [i.ok for i in runner.journal.invocations("Worker")] == [True, False, True]


def test_a_duplicate_may_run_at_the_same_time_as_the_first_delivery(make_runner: MakeRunner) -> None:
    # Given a batch delivered twice at once (as two pollers of SQS may), to a handler that takes its time
    template = TEMPLATE
    slow = HANDLER.replace("    sqs.list_queues()", "    sqs.list_queues()\n    time.sleep(0.5)")
    runner = make_runner(template, {"worker": slow}, mode="process")
    runner.faults.arm([Fault("u", "sqs-duplicate", target="Work", limit=1, value=1)], seed=1)

    # When a message is sent
    _send(runner, "twice")
    runner.journal.wait_until(lambda: len(runner.journal.invocations("Worker")) == 2, timeout=15)

    # Then both invocations of it ran at once: each began before the other ended
    first, second = runner.journal.invocations("Worker")
    assert [i.event["Records"][0]["body"] for i in (first, second)] == ["twice", "twice"]
    assert first.started_at < second.finished_at
    assert second.started_at < first.finished_at


def test_a_delayed_message_comes_late(make_runner: MakeRunner) -> None:
    # Given a message held back for 2 s when first received
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process", concurrency_cap=ONE_POLLER)
    runner.faults.arm([Fault("l", "sqs-delay", target="Work", limit=1, value=2)], seed=1)

    # When it is sent
    sent = time.time()
    _send(runner, "late")
    (handled,) = runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=15)

    # Then it was handled at least 2 s later
    assert handled.started_at - sent >= 1.9


def test_a_lone_message_held_back_by_a_reorder_comes_a_second_late_its_firing_naming_its_instance(
    make_runner: MakeRunner,
) -> None:
    # Given a reorder that finds a message alone in its batch
    runner = make_runner(TEMPLATE, {"worker": HANDLER}, mode="process", concurrency_cap=ONE_POLLER)
    runner.faults.arm([Fault("r", "sqs-reorder", target="Work", limit=1)], seed=1)

    # When a message about an instance is sent
    sent = time.time()
    _send(runner, '{"record": "i-0123456789abcdef0/terminate/t"}')
    (handled,) = runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=15)

    # Then it was held back a second, and the firing names the instance whose lifecycle it held up
    assert handled.started_at - sent >= 0.9
    (firing,) = runner.faults.firings()
    assert firing.detail == "Work batch of 1 i-0123456789abcdef0"


def test_a_message_that_comes_late_again_and_again_is_not_dead_lettered_for_it(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given a queue that dead-letters a message at its second receive, and a message that comes late three times
    template = TEMPLATE.replace(
        """      VisibilityTimeout: 1
  Out:""",
        """      VisibilityTimeout: 1
      RedrivePolicy:
        deadLetterTargetArn: !GetAtt Dead.Arn
        maxReceiveCount: 2
  Dead:
    Type: AWS::SQS::Queue
  Out:""",
    )
    runner = make_runner(
        template, {"worker": HANDLER}, mode="process", log_dir=tmp_path / "logs", concurrency_cap=ONE_POLLER
    )
    runner.faults.arm([Fault("l", "sqs-delay", target="Work", limit=3, value=1)], seed=1)

    # When it is sent (about an instance, as a lifecycle's messages are)
    body = '{"record": "i-0123456789abcdef0/terminate/t"}'
    _send(runner, body)
    (handled,) = runner.journal.wait_until(lambda: runner.journal.invocations("Worker"), timeout=20)

    # Then it was handled, as a first receive, and nothing was dead-lettered: a late delivery is not a receive
    assert runner.faults.counts() == {"sqs-delay": 3}
    # (each firing names the instance the message is about, for the judges of the campaign)
    assert all(f.detail.endswith(" i-0123456789abcdef0") for f in runner.faults.firings())
    assert handled.ok
    assert handled.event["Records"][0]["body"] == body
    assert handled.event["Records"][0]["attributes"]["ApproximateReceiveCount"] == "1"
    dead = runner.sqs.receive_message(QueueUrl=runner.queue("Dead").url, WaitTimeSeconds=0)
    assert not dead.get("Messages")
    # and the mapping's delivery log tells the message's way: three late copies, then the invocation
    runner.stop()
    log = (tmp_path / "logs" / "deliveries-t.log").read_text()
    assert log.count("Work late ") == 3
    assert log.count("Work received ") == 4
    # ...each receive naming the lifecycle record the message is for (its body's "record")
    assert log.count(" for i-0123456789abcdef0/terminate/t") == 4
    assert f"Work invoked Worker with {handled.event['Records'][0]['messageId']} in " in log


EVENTS = """
Resources:
  Intake:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: functions/intake/
      Handler: app.handler
      Timeout: 10
      Events:
        Lifecycle:
          Type: EventBridgeRule
          Properties:
            Pattern: {source: [aws.autoscaling]}
"""

INTAKE = """
import time

def handler(event, context):
    time.sleep(0.3)
    return event["detail"]["n"]
"""

# Event 2's invocations each say they began (a file in FOLDER), then wait for the other one's to be there, at most
# 5 s: invocations run at once both get past the wait at once; one run after the other, the first ends before the
# second begins. (A 0.3 s run was not enough: under load the second began after the first had ended.)
MEETING = """
import os, time, uuid

FOLDER = {folder!r}

def handler(event, context):
    n = event["detail"]["n"]
    if n == 2:
        open(os.path.join(FOLDER, uuid.uuid4().hex), "w").close()
        deadline = time.monotonic() + 5
        while len(os.listdir(FOLDER)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    else:
        time.sleep(0.3)
    return n
"""


def _lifecycle_event(n: int) -> dict[str, object]:
    return {
        "source": "aws.autoscaling",
        "detail-type": "x",
        "detail": {"n": n, "EC2InstanceId": f"i-0000000{n}"},
    }


def test_an_event_is_invoked_twice_after_the_first_or_at_the_same_time(
    make_runner: MakeRunner, tmp_path: Path
) -> None:
    # Given an EventBridge rule whose events Lambda invokes twice (at least once), once after and once at once
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    intake = MEETING.format(folder=str(meeting))
    runner = make_runner(EVENTS, {"intake": intake}, mode="process", async_concurrency=2)
    runner.faults.arm([Fault("u", "event-duplicate", target="Intake", limit=1)], seed=1)

    # When an event is published
    runner.publish(_lifecycle_event(1))
    first, second = runner.journal.wait_until(
        lambda: len(runner.journal.invocations("Intake")) == 2 and runner.journal.invocations("Intake"),
        timeout=10,
    )

    # Then it ran twice, one after the other; and the firing names the instance the event is about
    assert [i.response for i in (first, second)] == [1, 1]
    assert second.started_at >= first.finished_at
    assert [f.detail for f in runner.faults.firings()] == ["Intake rule:Lifecycle i-00000001"]

    # And with value 1, at the same time: each began before the other ended
    runner.faults.arm([Fault("u", "event-duplicate", target="Intake", limit=1, value=1)], seed=1)
    runner.publish(_lifecycle_event(2))
    third, fourth = runner.journal.wait_until(
        lambda: len(runner.journal.invocations("Intake")) == 4 and runner.journal.invocations("Intake")[2:],
        timeout=10,
    )
    assert [i.response for i in (third, fourth)] == [2, 2]
    assert third.started_at < fourth.finished_at
    assert fourth.started_at < third.finished_at


def test_a_late_event_is_overtaken_by_the_next(make_runner: MakeRunner) -> None:
    # Given the first event of a rule invoked 2 s late (a delivery EventBridge retried)
    runner = make_runner(EVENTS, {"intake": INTAKE})
    runner.faults.arm([Fault("l", "event-delay", target="Intake", limit=1, value=2)], seed=1)

    # When two events are published, one after the other
    sent = time.time()
    runner.publish(_lifecycle_event(1))
    runner.publish(_lifecycle_event(2))
    invocations = runner.journal.wait_until(
        lambda: len(runner.journal.invocations("Intake")) == 2 and runner.journal.invocations("Intake"),
        timeout=10,
    )

    # Then the second ran first, and the first at least 2 s after it was published
    assert [i.response for i in invocations] == [2, 1]
    assert invocations[1].started_at - sent >= 1.9
