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


def test_an_invocation_stamped_ahead_of_the_clock_does_not_hide_the_lateness_of_the_ticks_before_that_time() -> (
    None
):
    # Given a sweep invoked by hand with a schedule event whose time is ten minutes ahead (copied from a machine
    # whose clock runs ahead, or edited), after a tick swept on time
    clock, metrics, part = FakeClock(), FakeMetrics(), Lateness()
    sweep = sweeper(clock, metrics, part)
    sweep.sweep(time_left=lambda: 300, scheduled_at=clock.now())
    clock.advance(60)
    sweep.sweep(time_left=lambda: 300, scheduled_at=clock.now() + timedelta(minutes=10))

    # When the next tick's event comes 4 minutes after it fired (retried while the sweeper was throttled)
    clock.advance(240 + 240)
    report = sweep.sweep(time_left=lambda: 300, scheduled_at=clock.now() - timedelta(seconds=240))

    # Then it says how late, and is counted late: no tick was swept at that time
    assert report["SweepLateSeconds"] == 240
    assert metrics.counts["SweepsLate"] == 1
