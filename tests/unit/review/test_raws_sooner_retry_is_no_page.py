"""A record retried on purpose comes back sooner than its queue's visibility timeout (``entrypoints.retry_in``), and
the receive that follows is told from the one a full timeout on (``retried_again``: the function's error alarm) by
the time since its first receive, against half the timeout. But a sooner retry comes back that long after the
record's failure, not after its receive: a record that failed 20 s into its invocation with a server's Retry-After
of 60 s (the cap) came back 80 s after its first receive, past half the work queues' 150 s, and its second
receive, the very retry the Retry-After asked for, failed the invocation as a throttle that lasts (a page); so did
a 10 s retry of a record that failed 40 s into its invocation on a work queue of 90 s (WorkVisibilityTimeoutSeconds'
least). A record is now brought back sooner only when it comes back within two thirds of the timeout since its first
receive, and a receive is a redelivery at the timeout from five sixths of it on (a sixth apart: a poller late)."""

from __future__ import annotations

from typing import Any

import pytest

from nodecycle import entrypoints
from nodecycle.domain.errors import TransientError
from nodecycle.entrypoints import BatchFailed, partial_batch


class Queue:
    """One message of an SQS queue, on a clock the test moves: received, failed, brought back."""

    def __init__(self, visibility_timeout: int, monkeypatch: pytest.MonkeyPatch) -> None:
        self.visibility_timeout = visibility_timeout
        self.clock = 1_000_000.0
        self.first_receive: float | None = None
        self.receives = 0
        self.visible_at = self.clock
        monkeypatch.setattr(entrypoints, "now", lambda: self.clock)

    def redeliver_in(self, receipt_handle: str, seconds: int) -> None:
        assert receipt_handle == f"handle-{self.receives}"
        self.visible_at = self.clock + seconds

    def receive(self) -> dict[str, Any]:
        """The message at its next receive, the clock at the moment it is visible again."""
        self.clock = max(self.clock, self.visible_at)
        self.receives += 1
        if self.first_receive is None:
            self.first_receive = self.clock
        self.visible_at = self.clock + self.visibility_timeout
        attributes = {
            "ApproximateReceiveCount": str(self.receives),
            "ApproximateFirstReceiveTimestamp": str(int(self.first_receive * 1000)),
        }
        record = {"messageId": "m-1", "receiptHandle": f"handle-{self.receives}", "attributes": attributes}
        return {"Records": [record]}

    def failing_after(self, seconds: float, error: Exception) -> Any:
        """A handler that fails with ``error`` ``seconds`` into its invocation."""

        def handle(_: dict[str, Any]) -> None:
            self.clock += seconds
            raise error

        return handle


def throttled() -> TransientError:
    return TransientError("HTTP 429 Too Many Requests", retry_after=60)


@pytest.mark.parametrize(
    ("timeout", "failing_after", "error"),
    [
        (150, 20.0, throttled()),  # the template's default: a Retry-After of a minute
        (90, 40.0, TransientError("Rate exceeded")),  # WorkVisibilityTimeoutSeconds' least: the 10 s retry
    ],
)
def test_the_sooner_retry_finding_the_throttle_still_there_is_no_page(
    monkeypatch: pytest.MonkeyPatch, timeout: int, failing_after: float, error: Exception
) -> None:
    # Given a record whose handler fails (an ordinary retry) some seconds into its invocation
    queue = Queue(timeout, monkeypatch)
    handle = queue.failing_after(failing_after, error)
    assert partial_batch(queue.receive(), handle, queue) == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}

    # When it comes back at its next receive and meets the throttle again, Then that is an ordinary retry still
    # (before: BatchFailed, the function's error alarm, for the sooner retry itself)
    again = queue.receive()
    assert queue.clock - (queue.first_receive or 0) < timeout * 2 / 3  # (it came back sooner)
    assert partial_batch(again, queue.failing_after(0.5, error), queue) == {
        "batchItemFailures": [{"itemIdentifier": "m-1"}]
    }


@pytest.mark.parametrize(
    ("timeout", "failing_after"), [(150, 20.0), (150, 59.0), (90, 40.0), (90, 20.0), (180, 29.0)]
)
def test_a_throttle_that_lasts_pages_at_its_first_receive_a_timeout_on(
    monkeypatch: pytest.MonkeyPatch, timeout: int, failing_after: float
) -> None:
    # Given a record whose every receive meets a throttle (a Retry-After of a minute) some seconds into it
    queue = Queue(timeout, monkeypatch)
    handle = queue.failing_after(failing_after, throttled())

    # When it is received again and again, Then the invocation fails (the page) at the first receive that came a
    # queue's timeout or more after the first: not before (each receive's own time before its failure counted, a
    # sooner retry), nor later
    for _ in range(3):
        batch = queue.receive()
        since = queue.clock - (queue.first_receive or 0)
        try:
            partial_batch(batch, handle, queue)
        except BatchFailed:
            assert since >= timeout
            return
        assert since < timeout
    pytest.fail("no page in three receives")
