"""A record of the intake queue redriven from its dead-letter queue, failing an ordinary retry (a throttle) at its
first receive back. SQS's redrive (StartMessageMoveTask, the runbook's) makes each message a new one: "All redriven
messages are considered new messages and assigned a new messageID and enqueueTime" (SQS developer guide, dead-letter
queue redrive; the sandbox's move task does the same, tests/sandbox/aws/test_sqs_move_tasks.py), so its receive
count and first receive start over: it is retried sooner (10 s), and its failure pages nobody. A record whose count
is past the queue's maxReceiveCount at a receive soon after its first (ApproximateReceiveCount is approximate; a
redrive policy lowered while it was in flight) is not brought back sooner (that would only dead-letter it sooner)
and pages nobody either. Both held before these tests: no defect."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle import entrypoints
from nodecycle.domain.errors import TransientError
from nodecycle.entrypoints import partial_batch

NOW = 2_000_000.0
INTAKE_QUEUE_TIMEOUT = 180  # (wiring.intake.INTAKE_QUEUE_VISIBILITY_SECONDS)


class Queue:
    visibility_timeout = INTAKE_QUEUE_TIMEOUT

    def __init__(self) -> None:
        self.sooner: list[tuple[str, int]] = []

    def redeliver_in(self, receipt_handle: str, seconds: int) -> None:
        self.sooner.append((receipt_handle, seconds))


def record(receives: int, first_receive: float) -> dict[str, Any]:
    attributes = {
        "ApproximateReceiveCount": str(receives),
        "ApproximateFirstReceiveTimestamp": str(int(first_receive * 1000)),
    }
    return {"messageId": "m-1", "receiptHandle": "handle-1", "attributes": attributes, "body": "{}"}


def throttled(_: dict[str, Any]) -> None:
    raise TransientError("Rate exceeded")


@pytest.mark.parametrize(
    ("receives", "first_receive", "sooner"),
    [(1, NOW, [("handle-1", 10)]), (6, NOW - 5, [])],
    ids=["redriven: a new message", "past maxReceiveCount soon after its first receive"],
)
def test_a_redriven_record_retried_comes_back_as_a_new_one_and_pages_nobody(
    monkeypatch: pytest.MonkeyPatch, receives: int, first_receive: float, sooner: list[tuple[str, int]]
) -> None:
    monkeypatch.setattr(entrypoints, "now", lambda: NOW)
    queue = Queue()

    # When the record alone in its batch fails an ordinary retry, Then it is reported alone (no BatchFailed: the
    # function's error alarm), and brought back sooner only as a first receive
    response = partial_batch({"Records": [record(receives, first_receive)]}, throttled, queue)
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert queue.sooner == sooner
