"""The sweeper-not-running alarm stays quiet while sweeps run on schedule, however long each lasts, and fires once
they stopped.

Lambda publishes Invocations only for minutes with one, and sends an invocation's metrics once it finished, in
1-minute intervals ("Using CloudWatch metrics with Lambda", AWS Lambda developer guide): CloudWatch has a sweep's
count up to its length (5 s to its 300 s timeout less a 45 s reserve) and a minute after it started, whether the
count is dated at its start or its end. A run starts at its schedule, up to a minute late (EventBridge), or once
the run before it ended (reserved concurrency 1). CloudWatch evaluates the alarm every minute with the data it has
then, a minute without data breaching (TreatMissingData breaching), and a new alarm at once, at its creation
("When this operation creates an alarm, the alarm state is immediately set to INSUFFICIENT_DATA. The alarm is then
evaluated", PutMetricAlarm; every data point missing and breaching: ALARM, the table of "How alarm state is
evaluated when data is missing")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.functions.test_operations_template import RESOURCES, RUNBOOK, intrinsics

LONGEST_SWEEP = 255  # seconds: the sweeper's timeout, less the reserve it keeps to end by
SENT_WITHIN = 60  # seconds: Lambda sends an invocation's metrics in 1-minute intervals once it ends
LENGTHS = [(5,), (LONGEST_SWEEP,), (5, LONGEST_SWEEP), (LONGEST_SWEEP, 5, 5), (120, 5, LONGEST_SWEEP)]


def not_running_alarm(interval: int) -> dict[str, Any]:
    return intrinsics({"SweepIntervalMinutes": str(interval)}).resolve(
        RESOURCES["SweeperNotRunningAlarm"]["Properties"]
    )


def sweeps(
    interval: int, missed: set[int] | range, horizon: int, *, offset: int, lengths: tuple[int, ...], late: int
) -> dict[int, int]:
    """The minutes with an invocation -> the second CloudWatch has its count from. Run k is scheduled at
    ``offset`` + k intervals, starts ``late`` seconds after that on odd runs, or 30 s after the run before it ended
    if that is later, and lasts ``lengths`` (taken in turn) seconds; the runs in ``missed`` never start."""
    step, ended = interval * 60, 0
    minutes: dict[int, int] = {}
    for k in range(horizon // step):
        if k in missed:
            continue
        start = max(offset + k * step + (late if k % 2 else 0), ended + 30 if ended else 0)
        ended = start + lengths[k % len(lengths)]
        minutes[start // 60] = min(minutes.get(start // 60, ended + SENT_WITHIN), ended + SENT_WITHIN)
    return minutes


def firing(
    alarm: Mapping[str, Any], minutes: Mapping[int, int], horizon: int, *, since: int = 0
) -> list[int]:
    """The minutes from ``since`` (seconds, rounded up to a minute) at which CloudWatch holds the alarm in ALARM: DatapointsToAlarm of its last
    EvaluationPeriods minutes without a count it has by then."""
    assert (alarm["Period"], alarm["Statistic"], alarm["ComparisonOperator"], alarm["TreatMissingData"]) == (
        60,
        "Sum",
        "LessThanThreshold",
        "breaching",
    )
    window, needed = int(alarm["EvaluationPeriods"]), int(alarm["DatapointsToAlarm"])
    fired = []
    for now in range(-(-since // 60) * 60, horizon, 60):
        known = {minute for minute, seen in minutes.items() if seen <= now}
        if sum(1 for m in range(now // 60 - window, now // 60) if m not in known) >= needed:
            fired.append(now)
    return fired


@pytest.mark.parametrize("interval", [1, 2, 3, 4, 5, 10, 30, 60])
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("offset", [0, 37, 250])
@pytest.mark.parametrize("late", [0, 59])
def test_the_sweeper_not_running_alarm_stays_quiet_while_sweeps_run_however_long_each_lasts(
    interval: int, lengths: tuple[int, ...], offset: int, late: int
) -> None:
    # Given sweeps on schedule, some lasting to their reserve, every other one late at times
    horizon = 12 * max(interval * 60, 300) + 3600
    alarm = not_running_alarm(interval)
    minutes = sweeps(interval, set(), horizon, offset=offset, lengths=lengths, late=late)
    # When CloudWatch evaluates the alarm every minute from its first count on
    fired = firing(alarm, minutes, horizon, since=min(minutes.values()))
    # Then it never fires: the sweeper runs
    assert not fired, f"fired at {fired[:3]} s while sweeps ran ({interval}-minute sweeps)"
    # nor when one run is skipped among sweeps of a minute or less
    short = tuple(min(length, 60) for length in lengths)
    minutes = sweeps(interval, {5}, horizon, offset=offset, lengths=short, late=late)
    fired = firing(alarm, minutes, horizon, since=min(minutes.values()))
    assert not fired, f"fired at {fired[:3]} s for one run skipped ({interval}-minute sweeps)"


@pytest.mark.parametrize("interval", [1, 2, 3, 4, 5, 10, 30, 60])
def test_the_sweeper_not_running_alarm_fires_once_sweeps_stopped(interval: int) -> None:
    alarm = not_running_alarm(interval)
    window = int(alarm["EvaluationPeriods"])
    horizon = 12 * max(interval * 60, 300) + 3600 + window * 60
    minutes = sweeps(interval, range(5, 10**6), horizon, offset=37, lengths=(5,), late=0)
    fired = firing(alarm, minutes, horizon, since=min(minutes.values()))
    last = 37 + 4 * interval * 60
    assert fired, f"a schedule that stopped never fires it ({interval}-minute sweeps)"
    assert fired[0] - last <= (window + 1) * 60, "it fires a window after the last sweep started"
    assert fired[-1] == horizon - 60, "and holds"
    # from 4-minute sweeps on, two runs missed in a row are enough
    if interval >= 4:
        minutes = sweeps(interval, {5, 6}, horizon, offset=37, lengths=(5,), late=0)
        assert firing(alarm, minutes, horizon, since=min(minutes.values()))


@pytest.mark.parametrize("interval", [1, 5, 60])
def test_a_new_stacks_sweeper_not_running_alarm_fires_until_its_first_sweep_as_the_runbook_says(
    interval: int,
) -> None:
    # CloudWatch evaluates the alarm at its creation, before any sweep: every minute of its window is missing, so
    # breaching. The rate schedule's first run comes an interval after the rule's creation.
    alarm = not_running_alarm(interval)
    horizon = 4 * interval * 60 + 3600
    minutes = {
        m: seen for m, seen in sweeps(interval, set(), horizon, offset=0, lengths=(5,), late=0).items() if m
    }
    fired = firing(alarm, minutes, horizon)
    assert fired, "a new alarm with no data yet is in ALARM at once"
    assert fired[0] == 0, "at once"
    assert fired[-1] <= min(minutes.values()) + 60, "and clears once the first sweep's count is sent"
    entry = RUNBOOK.split("### Sweeper not running", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    assert "a new stack" in entry.lower(), (
        "the runbook's entry says a new stack's alarm fires until its first sweep"
    )
