"""The failed sweeps' alarm holds while sweeps keep failing, whatever the sweep interval, and pages once.

Lambda's Errors of a run is timestamped when it was invoked, not when the error occurred (AWS Lambda developer guide,
"Types of metrics for Lambda functions"), and sent once the run ended, in Lambda's 1-minute intervals ("Using
CloudWatch metrics with Lambda"): CloudWatch has it up to the sweeper's 300 s timeout and a minute later. A run
starts at its schedule (EventBridge's rate schedules run from the rule's creation), up to a minute late, or once the
run before it ended (reserved concurrency 1: the tick that came meanwhile is throttled and tried again). CloudWatch
evaluates an alarm every minute over its last EvaluationPeriods periods, with the data it holds then, a period
without data being within the threshold under TreatMissingData notBreaching; the alarm's actions run at each change
of state into ALARM, so a minute of OK between two failed sweeps of a lasting failure pages again. (CloudWatch
also reads the data points a little before the window, its "evaluation range", by an amount it does not state:
left out here, the harsher reading.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from tests.functions.test_operations_template import RESOURCES, intrinsics

TIMEOUT = 300  # seconds: the sweeper's, a run the runtime ends there (a call that hung past its bound)
SENT_WITHIN = 60  # seconds: Lambda sends an invocation's metrics in 1-minute intervals once it ends
LENGTHS = [(5,), (TIMEOUT,), (5, TIMEOUT), (TIMEOUT, 5, 5), (120, 5, TIMEOUT)]


def errors_alarm(interval: int) -> dict[str, Any]:
    return intrinsics({"SweepIntervalMinutes": str(interval)}).resolve(
        RESOURCES["SweeperErrorsAlarm"]["Properties"]
    )


def runs(
    interval: int, failed: set[int] | range, horizon: int, *, offset: int, lengths: tuple[int, ...], late: int
) -> dict[int, tuple[float, int]]:
    """Each run's Errors: second it is timestamped at (the run's start) -> (its value, the second CloudWatch has it
    from: a minute after the run's end). Run k is scheduled at ``offset`` + k intervals, starts ``late`` seconds after that on odd
    runs, or 30 s after the run before it ended if that is later (its throttled tick tried again), and lasts
    ``lengths`` (taken in turn) seconds."""
    step, ended = interval * 60, 0
    points: dict[int, tuple[float, int]] = {}
    for k in range(horizon // step):
        start = max(offset + k * step + (late if k % 2 else 0), ended + 30 if k else 0)
        ended = start + lengths[k % len(lengths)]
        value, seen = points.get(start, (0.0, 0))
        points[start] = (value + (1.0 if k in failed else 0.0), max(seen, ended + SENT_WITHIN))
    return points


def in_alarm(alarm: Mapping[str, Any], known: Mapping[int, float], now: int) -> bool:
    """Whether CloudWatch finds ``alarm`` breaching at ``now`` (seconds, a whole minute) from the datapoints it holds
    then: each period's Sum (the alarm's statistic), the last EvaluationPeriods periods that ended, a period without
    data not breaching."""
    assert (alarm["Statistic"], alarm["ComparisonOperator"], alarm["TreatMissingData"]) == (
        "Sum",
        "GreaterThanThreshold",
        "notBreaching",
    )
    period, evaluated = int(alarm["Period"]), int(alarm["EvaluationPeriods"])
    needed, threshold = int(alarm.get("DatapointsToAlarm", evaluated)), float(alarm["Threshold"])
    sums: dict[int, float] = {}
    for at, value in known.items():
        sums[at // period] = sums.get(at // period, 0.0) + value
    last = now // period
    return sum(1 for p in range(last - evaluated, last) if sums.get(p, 0.0) > threshold) >= needed


def firing(alarm: Mapping[str, Any], points: Mapping[int, tuple[float, int]], horizon: int) -> list[int]:
    """The minutes CloudWatch holds the alarm in ALARM, each with the datapoints published by then."""
    return [
        now
        for now in range(0, horizon, 60)
        if in_alarm(alarm, {at: value for at, (value, seen) in points.items() if seen <= now}, now)
    ]


@pytest.mark.parametrize("interval", [1, 2, 5, 10, 30, 60])
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("offset", [0, 37, 250])
@pytest.mark.parametrize("late", [0, 50])
def test_the_failed_sweeps_alarm_holds_while_sweeps_keep_failing(
    interval: int, lengths: tuple[int, ...], offset: int, late: int
) -> None:
    # Given sweeps that fail from the 3rd run to the 12th (a role refused a call, a cluster unreachable)
    horizon = 20 * max(interval * 60, TIMEOUT) + 3600  # (20 runs, however long, and an hour)
    points = runs(interval, range(3, 13), horizon, offset=offset, lengths=lengths, late=late)
    failures = sorted(seen for value, seen in points.values() if value)  # when CloudWatch has each failure

    # When CloudWatch evaluates the alarm every minute
    fired = firing(errors_alarm(interval), points, horizon)

    # Then it fires within two minutes of the first failure's report and stays in ALARM, without a minute of OK,
    # until the last one (one page, not one per failed sweep), then clears
    assert fired, f"sweeps failing 10 times in a row never fire the alarm with {interval}-minute sweeps"
    assert fired[0] - failures[0] <= 120, (
        f"fired {fired[0] - failures[0]} s after the first failure was reported"
    )
    held = [at for at in range(fired[0], failures[-1] + 60, 60) if at not in fired]
    assert not held, f"back to OK at {held[:3]} s (and paged again) while sweeps kept failing"
    assert fired[-1] < horizon - 60, "it clears once sweeps succeed again"


@pytest.mark.parametrize("interval", [1, 5, 10, 60])
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("offset", [0, 37, 250])
def test_a_single_failed_sweep_fires_the_failed_sweeps_alarm(
    interval: int, lengths: tuple[int, ...], offset: int
) -> None:
    # A failed sweep may have left an action unkept near its heartbeat timeout: one pages, though its error is
    # dated up to 6 minutes before CloudWatch has it (a run the runtime ended at its timeout)
    horizon = 20 * max(interval * 60, TIMEOUT) + 3600
    alarm = errors_alarm(interval)
    for failed in ({3}, {4}):
        points = runs(interval, failed, horizon, offset=offset, lengths=lengths, late=0)
        assert firing(alarm, points, horizon), f"the failed sweep {failed} never fires the alarm"
    assert not firing(alarm, runs(interval, set(), horizon, offset=offset, lengths=lengths, late=50), horizon)
