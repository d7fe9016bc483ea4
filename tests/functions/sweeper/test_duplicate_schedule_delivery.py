"""The schedule's event delivered twice (EventBridge delivers at least once): the sweeper, at its reserved
concurrency of one, runs the second delivery after the first sweep ends, with the same schedule time. That
sweep is not late: the schedule's tick was swept on time by the first. Counted late (``SweepsLate``, its alarm)
by the first sweep's length, it would also settle stalled actions up to that much sooner than their last chance
(``SweepTime.late``)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords

OWNER = "stack-a"
MARGIN = timedelta(seconds=60)


class Lateness:
    """A sweep part that notes how late each sweep told it it was."""

    def __init__(self) -> None:
        self.told: list[timedelta] = []

    def __call__(self, open_records: object, now: object, time: SweepTime) -> Counts:
        self.told.append(time.late)
        return {}


def sweeper(clock: FakeClock, metrics: FakeMetrics, part: Lateness) -> Sweeper:
    records = InMemoryRecords()
    return Sweeper(
        owner=OWNER,
        records=records,
        clock=clock,
        metrics=metrics,
        parts={"late": part},
        shares={},
        late_after=MARGIN,
    )


def test_a_second_delivery_of_a_tick_already_swept_is_not_counted_late() -> None:
    # Given a sweep of the schedule's tick, on time, that ran for 3 minutes (throttled AWS calls)
    clock, metrics, part = FakeClock(), FakeMetrics(), Lateness()
    sweep = sweeper(clock, metrics, part)
    tick = clock.now()
    clock.advance(1)
    sweep.sweep(time_left=lambda: 300, scheduled_at=tick)
    clock.advance(180)

    # When the tick's event is delivered again, and runs as soon as the first sweep ended
    report = sweep.sweep(time_left=lambda: 300, scheduled_at=tick)

    # Then that sweep is not late, and nothing is counted late
    assert report["SweepLateSeconds"] == 0
    assert part.told == [timedelta(seconds=1), timedelta()]
    assert metrics.counts.get("SweepsLate", 0) == 0


def test_a_tick_first_delivered_late_is_still_counted_late() -> None:
    # Given a sweep of one tick
    clock, metrics, part = FakeClock(), FakeMetrics(), Lateness()
    sweep = sweeper(clock, metrics, part)
    sweep.sweep(time_left=lambda: 300, scheduled_at=clock.now())

    # When the next tick's event comes 4 minutes after it fired (retried while the sweeper was throttled)
    clock.advance(300 + 240)
    report = sweep.sweep(time_left=lambda: 300, scheduled_at=clock.now() - timedelta(seconds=240))

    # Then it says how late, and is counted late
    assert report["SweepLateSeconds"] == 240
    assert metrics.counts["SweepsLate"] == 1
