"""An intake message whose delivery failed (a fault refused one of its calls: the first work message's SendMessage
denied, a write throttled) waits out the intake queue's 180 s visibility timeout before SQS delivers it again. The
world counts such a message as settled while the story quiesces, then moves the queue's clock on for it: it reads
which messages those are from the runner's journal (the last delivery of each, failed)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from nodecycle_sandbox.chaos.world import ScenarioRun
from nodecycle_sandbox.runner.journal import Invocation, Journal


def _delivery(at: float, *messages: str, failed: tuple[str, ...] = ()) -> Invocation:
    records = [{"messageId": m, "receiptHandle": f"{m}@{at:g}"} for m in messages]
    return Invocation(
        "IntakeFunction", "sqs:IntakeQueue", "r", at, at + 0.1, True, {"Records": records}, None, None,
        records=messages, failures=failed,
    )  # fmt: skip


def _retried(*invocations: Invocation) -> dict[str, Any]:
    journal = Journal()
    for invocation in invocations:
        journal.record(invocation)
    run = object.__new__(ScenarioRun)  # (only its world's runners are read)
    run.world = SimpleNamespace(runners={"a": SimpleNamespace(journal=journal)})  # type: ignore[assignment]
    return run._retried_intake()


def test_the_messages_retried_are_those_whose_last_delivery_failed() -> None:
    # Given m1 failed and then taken, m2 failed twice, m3 taken, and an EventBridge event (no queue)
    found = _retried(
        _delivery(10.0, "m1", "m2", failed=("m1", "m2")),
        _delivery(11.0, "m3"),
        Invocation("IntakeFunction", "rule:StateChanges", "r", 12.0, 12.1, True, {}, None, None),
        _delivery(20.0, "m1"),
        _delivery(30.0, "m2", failed=("m2",)),
    )

    # Then m2 alone waits to be delivered again, with the receipt handle and time of its last receive
    assert found == {"a": [("m2", "m2@30", 30.0)]}
    # and with no failure, none
    assert _retried(_delivery(10.0, "m1"), _delivery(11.0, "m2")) == {}
