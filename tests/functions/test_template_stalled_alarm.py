"""The stalled lifecycles' alarm holds while lifecycles stay stalled, whatever the sweeps' lengths, and a single
stalled sweep pages no one.

Only the sweeper emits LifecyclesStalled, once a run (0 when none is overdue), when its lifecycles part ends: a
run's count comes a schedule offset, up to a minute of lateness (EventBridge starts a scheduled target within its
minute) and the sweep's own length after its interval's start, a length that varies from run to run (5 s to its
300 s timeout less a 45 s reserve). CloudWatch evaluates an alarm every minute over its last EvaluationPeriods
periods, a minute without data being within the threshold under TreatMissingData notBreaching; the alarm's
actions run at each change of state into ALARM, so a minute of OK inside a lasting stall pages again."""

from __future__ import annotations

import pytest

from tests.functions.test_operations_template import RESOURCES, alarm_fires, intrinsics

LONGEST_SWEEP = 255  # seconds: the sweeper's timeout, less the reserve it keeps to report
LENGTHS = [(20,), (5, LONGEST_SWEEP), (5, LONGEST_SWEEP, 120), (LONGEST_SWEEP, 5, 5)]


def stalled_alarm(interval: int) -> dict[str, object]:
    return intrinsics({"SweepIntervalMinutes": str(interval)}).resolve(
        RESOURCES["LifecyclesStalledAlarm"]["Properties"]
    )


def counts(
    interval: int, stalled: set[int] | range, horizon: int, *, offset: int, lengths: tuple[int, ...]
) -> dict[int, float]:
    """Each run's LifecyclesStalled: run k scheduled at ``offset`` + k intervals, started then or once the run
    before it ended (sweeps run one at a time: the function's reserved concurrency is 1), its count ``lengths``
    (taken in turn) seconds after its start; 1 while a lifecycle is stalled."""
    step, ended, points = interval * 60, 0, {}
    for k in range(horizon // step):
        ended = max(offset + k * step, ended) + lengths[k % len(lengths)]
        points[ended] = 1.0 if k in stalled else 0.0
    return points


@pytest.mark.parametrize("interval", [1, 2, 5, 10, 30, 60])
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("offset", [0, 37, 250])
def test_the_stalled_lifecycles_alarm_holds_while_lifecycles_stay_stalled(
    interval: int, lengths: tuple[int, ...], offset: int
) -> None:
    # Given lifecycles stalled from the 3rd sweep to the 12th, every sweep finding them overdue
    step = interval * 60
    horizon = 20 * step + 3600
    points = counts(interval, range(3, 13), horizon, offset=offset, lengths=lengths)
    # (two counts within one minute are one datapoint, its Maximum: then the next minute with one is the second)
    minutes = sorted({at // 60 * 60 for at, value in points.items() if value})
    second, last = minutes[1], minutes[-1]

    # When CloudWatch evaluates the alarm every minute
    firing = alarm_fires(stalled_alarm(interval), points, horizon)

    # Then it fires within two minutes of the second minute with a stalled count and stays in ALARM, without a minute
    # of OK, until the last one (one page, not one at each long sweep), then clears
    assert firing, f"lifecycles stalled for 10 sweeps never fire the alarm with {interval}-minute sweeps"
    assert firing[0] - second <= 120, f"fired {firing[0] - second} s after the second stalled minute"
    held = [at for at in range(firing[0], last + 60, 60) if at not in firing]
    assert not held, f"back to OK at {held[:3]} s (and paged again) while lifecycles stayed stalled"
    assert firing[-1] < horizon - 60, "it clears once no sweep finds one stalled"


@pytest.mark.parametrize("interval", [1, 2, 5, 10, 30, 60])
@pytest.mark.parametrize("lengths", LENGTHS)
@pytest.mark.parametrize("offset", [0, 37, 250])
def test_a_single_stalled_sweep_pages_no_one(interval: int, lengths: tuple[int, ...], offset: int) -> None:
    # A queue that is only slow (a large refresh's backlog) makes one sweep find a lifecycle overdue; the sweeper
    # re-sends it and the next sweep finds none
    horizon = 20 * interval * 60 + 3600
    alarm = stalled_alarm(interval)
    for stalled in ({3}, {4}, {5}):
        points = counts(interval, stalled, horizon, offset=offset, lengths=lengths)
        assert not alarm_fires(alarm, points, horizon), f"one stalled sweep ({stalled}) pages"
    assert not alarm_fires(alarm, counts(interval, set(), horizon, offset=offset, lengths=lengths), horizon)
