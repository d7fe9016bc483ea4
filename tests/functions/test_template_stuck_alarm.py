"""The stuck lifecycles' alarm holds while a lifecycle stays stuck, whatever the sweep interval, and pages once.

Only the sweeper emits LifecyclesStuck, once a run (0 when none is stuck), when its lifecycles part ends: a
lifecycle still stuck is counted at every sweep, "so that the alarm holds while it is stuck". CloudWatch
evaluates an alarm every minute over its last EvaluationPeriods periods, a period without data being within the
threshold under TreatMissingData notBreaching: the alarm goes back to OK, and its next breach goes to ALARM
again and runs its actions again (they run at each change of state). A sweep's count comes a schedule offset and
the sweep's own length after the interval's start (EventBridge's rate schedules run from the rule's creation,
not on the clock's five minutes; a sweep lasts up to its 300 s timeout less a 45 s reserve), so periods no
longer than the interval leave some without a count."""

from __future__ import annotations

import pytest

from tests.functions.test_operations_template import RESOURCES, alarm_fires, intrinsics

LONGEST_SWEEP = 255  # seconds: the sweeper's timeout, less the reserve it keeps to report


def stuck_alarm(interval: int) -> dict[str, object]:
    return intrinsics({"SweepIntervalMinutes": str(interval)}).resolve(
        RESOURCES["LifecyclesStuckAlarm"]["Properties"]
    )


def counts(
    interval: int, stuck: range, horizon: int, *, offset: int, lengths: tuple[int, ...]
) -> dict[int, float]:
    """Each run's LifecyclesStuck: run k scheduled at ``offset`` + k intervals, its count ``lengths`` (taken in
    turn) seconds later; 1 while the lifecycle is stuck."""
    step = interval * 60
    return {
        offset + k * step + lengths[k % len(lengths)]: 1.0 if k in stuck else 0.0
        for k in range(horizon // step)
    }


@pytest.mark.parametrize("interval", [1, 2, 5, 10, 30, 60])
@pytest.mark.parametrize("lengths", [(20,), (LONGEST_SWEEP, 5), (5, LONGEST_SWEEP, 120)])
@pytest.mark.parametrize("offset", [0, 37, 250])
def test_the_stuck_lifecycles_alarm_holds_while_a_lifecycle_stays_stuck(
    interval: int, lengths: tuple[int, ...], offset: int
) -> None:
    # Given a lifecycle stuck from the 3rd sweep to the 12th, every sweep counting it
    step = interval * 60
    horizon = 20 * step + 3600
    stuck = range(3, 13)
    points = counts(interval, stuck, horizon, offset=offset, lengths=lengths)
    first = offset + 3 * step + lengths[3 % len(lengths)]
    last = offset + 12 * step + lengths[12 % len(lengths)]

    # When CloudWatch evaluates the alarm every minute
    firing = alarm_fires(stuck_alarm(interval), points, horizon)

    # Then it fires within minutes of the first count and stays in ALARM, without a minute of OK, until the last
    # one (one page, not one per sweep), then clears
    assert firing, f"a lifecycle stuck for 10 sweeps never fires the alarm with {interval}-minute sweeps"
    assert firing[0] - first <= 360, f"fired {firing[0] - first} s after the first count"
    held = [at for at in range(firing[0], last + 60, 60) if at not in firing]
    assert not held, f"back to OK at {held[:3]} s (and paged again) while the lifecycle stayed stuck"
    assert firing[-1] < horizon - 60, "it clears once no sweep finds one stuck"


@pytest.mark.parametrize("interval", [1, 5, 60])
def test_the_stuck_lifecycles_alarm_stays_quiet_while_none_is_stuck(interval: int) -> None:
    horizon = 20 * interval * 60 + 3600
    points = counts(interval, range(0), horizon, offset=37, lengths=(LONGEST_SWEEP, 5))
    assert not alarm_fires(stuck_alarm(interval), points, horizon)
