"""A rate schedule fires within the minute of its tick, not on its second: "Your scheduled rule runs within that
minute, but not on the precise 0th second" (Amazon EventBridge User Guide, scheduled rules). The sandbox fired every
tick on its second, kinder than AWS to a function that reckons its next run an interval ahead."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from nodecycle_sandbox.runner.functions import FunctionSpec, ScheduleTrigger
from nodecycle_sandbox.runner.schedules import Schedules

INTERVAL = 0.2  # the sandbox's interval for a rate(1 minute) schedule: a tick may fire up to all of it late
TICKS = 8


def spec() -> FunctionSpec:
    return FunctionSpec(
        logical_id="Sweeper",
        name="stack-Sweeper",
        arn="arn:aws:lambda:us-east-1:123456789012:function:stack-Sweeper",
        code_dir=Path("."),
        handler_file=Path("app.py"),
        handler_name="handler",
        timeout=300,
        memory_mb=512,
        environment={},
        schedules=(ScheduleTrigger("Sweep", "rate(1 minute)", 60.0, True, None),),
    )


def test_the_ticks_of_a_rate_schedule_fire_within_their_minute_not_on_its_second() -> None:
    # Given a rate(1 minute) schedule run every INTERVAL
    fired: list[float] = []
    enough = threading.Event()

    def submit(function: FunctionSpec, event: Any, source: str) -> None:
        fired.append(time.monotonic())
        if len(fired) >= TICKS:
            enough.set()

    schedules = Schedules(
        functions=[spec()],
        submit=submit,
        stack_name="stack",
        account="123456789012",
        region="us-east-1",
        interval_override=INTERVAL,
    )

    # When it runs for TICKS ticks
    start = time.monotonic()
    schedules.start()
    try:
        assert enough.wait(timeout=10), fired
    finally:
        schedules.stop()

    # Then each tick fired after its time, in order, and not all of them on it: some late in their "minute"
    late = [at - start - tick * INTERVAL for tick, at in enumerate(fired[:TICKS], start=1)]
    assert min(late) >= 0, late
    assert fired == sorted(fired)
    assert max(late) - min(late) > INTERVAL / 4, late
