"""Second deliveries of schedule ticks that come out of order (EventBridge retries an event of a throttled
invocation for up to a day; a tick's duplicate may come after the next tick was swept): the sweeper remembers the
latest tick it swept, never an older one a late duplicate brings, so that the next tick's own duplicate is still
known for one and not counted late."""

from __future__ import annotations

from datetime import timedelta

from tests.functions.sweeper.test_duplicate_schedule_delivery import Lateness, sweeper
from tests.support.fakes import FakeClock, FakeMetrics


def test_a_late_duplicate_of_an_older_tick_does_not_make_the_sweeper_forget_the_newer_one() -> None:
    # Given two ticks five minutes apart, each swept on time
    clock, metrics, part = FakeClock(), FakeMetrics(), Lateness()
    sweep = sweeper(clock, metrics, part)
    first = clock.now()
    sweep.sweep(time_left=lambda: 300, scheduled_at=first)
    clock.advance(300)
    second = clock.now()
    sweep.sweep(time_left=lambda: 300, scheduled_at=second)

    # When the first tick's event is delivered again, then the second's, each once the sweep before it ended
    clock.advance(60)
    sweep.sweep(time_left=lambda: 300, scheduled_at=first)
    clock.advance(60)
    report = sweep.sweep(time_left=lambda: 300, scheduled_at=second)

    # Then neither duplicate is late: both ticks were swept on time
    assert report["SweepLateSeconds"] == 0
    assert part.told == [timedelta(), timedelta(), timedelta(), timedelta()]
    assert metrics.counts.get("SweepsLate", 0) == 0
