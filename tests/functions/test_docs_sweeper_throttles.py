"""What pages as SweeperThrottlesAlarm, as the runbook must say it: Lambda throttles an asynchronous event over the
function's reserved concurrency and keeps it in its queue, retried with a back-off for up to the event's maximum
age ("For throttling errors (429) ... Lambda returns the event to the queue and attempts to run the function
again for up to 6 hours", How Lambda handles errors and retries with asynchronous invocation; the sandbox does
so: runner/async_invoke.py). The sweeper's reserved concurrency is 1, so a schedule that fires while a sweep runs
is throttled: no extra invoker needed. A sweep may run up to its timeout less its reserve, longer than the
shorter intervals the template accepts; and a tick delivered twice (EventBridge delivers at least once) or a
sweep run by hand meets one at any interval. An operator told to "remove the extra invoker" finds none."""

from __future__ import annotations

import re
from pathlib import Path

from nodecycle.domain.sweep.sweep_time import RESERVE
from tests.functions.test_operations_template import RESOURCES

ROOT = Path(__file__).resolve().parents[2]


def entry(title: str) -> str:
    text = (ROOT / "docs/runbook.md").read_text()
    match = re.search(rf"^### {re.escape(title)}\n(.*?)(?=^##)", text, flags=re.DOTALL | re.MULTILINE)
    assert match, title
    return " ".join(match.group(1).split())


def intervals_a_sweep_can_outlast() -> list[int]:
    sweeper = RESOURCES["SweeperFunction"]["Properties"]
    assert (
        sweeper["ReservedConcurrentExecutions"] == 1
    )  # (one sweep at a time: the next tick waits, throttled)
    longest = int(sweeper["Timeout"]) - RESERVE.total_seconds()
    return [minutes for minutes in range(1, 61) if minutes * 60 < longest]


def test_a_sweep_can_outlast_the_shorter_intervals_the_template_accepts() -> None:
    # (SweepIntervalMinutes takes 1 to 60: the ones below 5 are shorter than a long sweep)
    assert intervals_a_sweep_can_outlast() == [1, 2, 3, 4]


def test_the_runbook_says_a_sweeper_throttle_is_a_tick_that_came_while_a_sweep_ran() -> None:
    text = entry("Function throttles")

    # the cause: the schedule fired (or a tick came again, or a sweep by hand) while the last sweep still ran
    assert "SweeperThrottlesAlarm" in text
    assert re.search(r"sweeper[^.]*reserved concurrency of 1", text), (
        "the sweeper's one-at-a-time is not named"
    )
    assert "while the last sweep still ran" in text
    assert "SweepIntervalMinutes" in text, "the interval a long sweep outlasts is not named"
    # what becomes of the tick (run late, when the sweep ends) and where to go on from there
    assert "(#sweeps-late)" in text
    assert "Duration" in text, "the sweeps' length to compare with the interval is not named"
