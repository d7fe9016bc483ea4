"""An SQS event source mapping whose polls are refused (the function's role denied sqs:ReceiveMessage on its
queue): one WARNING line per refused poll, the first of a run with its traceback, and the polls backing off as
Lambda's poller does, not a traceback every second. Lambda documents no figures for its poller's back-off; the
sandbox waits 1 s after the first failure, doubling, at most 16 s, and starts over once a poll answers."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.runner.functions import FunctionSpec, SqsTrigger
from nodecycle_sandbox.runner.journal import Journal
from nodecycle_sandbox.runner.resources import QueueInfo
from nodecycle_sandbox.runner.sqs_source import SqsEventSource

QUEUE = QueueInfo(
    logical_id="DrainQueue",
    name="drain",
    url="http://sqs.local/123456789012/drain",
    arn="arn:aws:sqs:eu-west-1:123456789012:drain",
    visibility_timeout=30,
    max_receive_count=None,
    dead_letter_arn=None,
)
DENIED = {
    "Error": {
        "Code": "AccessDenied",
        "Message": "User: arn:aws:sts::123456789012:assumed-role/DrainRole/drain is not authorized to perform: "
        "sqs:receivemessage on resource: arn:aws:sqs:eu-west-1:123456789012:drain",
    }
}


class Polls:
    """The queue as the function's role sees it: ``refused`` polls denied, then ones that answer with nothing."""

    def __init__(self, refused: int) -> None:
        self.refused = refused
        self.meta = type("Meta", (), {"events": type("Events", (), {"register": lambda *a, **k: None})()})()

    def receive_message(self, **_: Any) -> dict[str, Any]:
        if self.refused > 0:
            self.refused -= 1
            raise ClientError(DENIED, "ReceiveMessage")  # type: ignore[arg-type]
        return {}


class Clock(threading.Event):
    """The poller's waits, recorded instead of slept; set (stopping the poller) after ``waits`` of them."""

    def __init__(self, waits: int) -> None:
        super().__init__()
        self.waits: list[float] = []
        self._left = waits

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0))
        self._left -= 1
        if self._left <= 0:
            self.set()
        return self.is_set()


def source(polls: Polls) -> SqsEventSource:
    trigger = SqsTrigger("Work", QUEUE, 10, 0.0, True, None, True)
    spec = FunctionSpec("DrainFunction", "drain", "arn:fn", Path("."), Path("h.py"), "handler", 60, 256, {})
    return SqsEventSource(
        spec=spec,
        trigger=trigger,
        invoke=lambda *_: pytest.fail("nothing to invoke"),
        journal=Journal(),
        client_factory=lambda: polls,  # type: ignore[arg-type,return-value]
        region="eu-west-1",
        concurrency=1,
        poll_wait=0,
    )


def test_refused_polls_warn_once_each_with_one_traceback_and_back_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given a mapping whose role is refused its queue's polls six times, then allowed again
    polls = Polls(refused=6)
    mapping = source(polls)
    clock = Clock(waits=6)
    mapping._stopping = clock

    # When its poller runs
    with caplog.at_level(logging.DEBUG, logger="nodecycle_sandbox.runner.sqs_source"):
        mapping._poll()

    # Then each refused poll is one WARNING line naming the refusal, only the first with its traceback
    lines = [r for r in caplog.records if r.name == "nodecycle_sandbox.runner.sqs_source"]
    assert [r.levelno for r in lines] == [logging.WARNING] * 6
    assert all("AccessDenied" in r.getMessage() for r in lines)
    assert [bool(r.exc_info) for r in lines] == [True] + [False] * 5
    # and the polls back off, 1 s doubling up to 16 s (before: one traceback every second)
    assert clock.waits == [1, 2, 4, 8, 16, 16]


def test_a_poll_that_answers_starts_the_back_off_over(caplog: pytest.LogCaptureFixture) -> None:
    # Given a mapping refused three polls, answered once (an empty long poll), then refused again
    polls = Polls(refused=3)
    mapping = source(polls)
    clock = Clock(waits=5)
    mapping._stopping = clock
    answered = polls.receive_message

    def receive(**kwargs: Any) -> dict[str, Any]:
        answer = answered(**kwargs)
        polls.refused = 99  # (refused again from the next poll on)
        return answer

    polls.receive_message = receive  # type: ignore[method-assign]

    # When its poller runs
    with caplog.at_level(logging.DEBUG, logger="nodecycle_sandbox.runner.sqs_source"):
        mapping._poll()

    # Then the refusals after the answer start again at 1 s, with their traceback once more
    assert clock.waits == [1, 2, 4, 1, 2]
    lines = [r for r in caplog.records if r.name == "nodecycle_sandbox.runner.sqs_source"]
    assert [bool(r.exc_info) for r in lines] == [True, False, False, True, False]
