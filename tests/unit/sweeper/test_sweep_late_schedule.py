"""A sweep that runs late: EventBridge delivers the schedule late (the sweeper throttled at its reserved concurrency
of one, its event retried), or the sweep before failed. The last sweep before an action's global timeout may then
come after the action ended (its heartbeat timeout, or the global one): the sweep must say the action expired, not
that it settled it; it says how late it ran (its alarm); and it keeps alive, and settles, what a next sweep as late
as this one would reach too late."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper
from tests.support.fakes import FakeMetrics
from tests.unit.foundation.test_engine import PLAN, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import GRACE, INTERVAL, MARGIN, Repair

SETTLE_BEFORE = INTERVAL + 2 * MARGIN  # as Repair's part


def late_sweep(repair: Repair, late: timedelta) -> Counts:
    """The lifecycles' part of a sweep that starts ``late`` after its schedule."""
    time = SweepTime(lambda: 300, timedelta(), late=late)
    return repair.part()(list(repair.records.open_records("stack-a")), repair.clock.now(), time)


@pytest.mark.parametrize(
    "after_end",
    [timedelta(seconds=-5), timedelta(seconds=30)],
    ids=["before-the-global-timeout", "after-the-global-timeout"],
)
def test_a_late_sweep_that_finds_a_stalled_action_timed_out_records_an_expiry_not_a_settlement(
    after_end: timedelta,
) -> None:
    # Given a stalled drain that the sweep before its last chance kept alive (a heartbeat timeout of 300 s), and
    # the next sweep, due inside the last-chance window, late by more than two heartbeat margins: Auto Scaling
    # ended the action at its heartbeat deadline (the hook's default result), before that sweep ran
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1")
    end = record.global_deadline
    previous = end - SETTLE_BEFORE - timedelta(seconds=10)
    repair.records.create(kept_alive(repair.autoscaling, record, previous))
    repair.clock.current = end + after_end
    assert repair.clock.now() - (previous + INTERVAL) > 2 * MARGIN

    # When that sweep runs
    counts = late_sweep(repair, repair.clock.now() - (previous + INTERVAL))

    # Then it says the action expired (its alarm), and the lifecycle goes on past its completion as one whose
    # action expired: not as settled by the sweeper, nor as settled by someone else
    assert (counts["LifecyclesExpired"], counts["LifecyclesSettled"]) == (1, 0)
    assert repair.metrics.counts["LifecycleActionsExpired"] == 1
    assert "GlobalTimeoutsNear" not in repair.metrics.counts
    assert repair.autoscaling.completed == []
    moved = repair.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.outcome) == (Step.CLEANUP, "action-expired")


def test_a_sweep_that_finds_the_action_alive_at_its_last_chance_still_settles_it() -> None:
    # Given a stalled drain whose last heartbeat the record does not show (its commit lost), so that the record's
    # heartbeat deadline has passed though the action lives
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1")
    end = record.global_deadline
    repair.records.create(kept_alive(repair.autoscaling, record, end - SETTLE_BEFORE - timedelta(seconds=10)))
    repair.autoscaling.kept_alive(record.token, end - timedelta(seconds=200))
    repair.clock.current = end - timedelta(seconds=30)

    # When the last sweep runs, Then it settles the action with its failure result
    counts = late_sweep(repair, timedelta())
    assert (counts["LifecyclesSettled"], counts["LifecyclesExpired"]) == (1, 0)
    assert len(repair.autoscaling.completed) == 1


def test_a_late_sweep_keeps_alive_what_a_next_sweep_as_late_would_reach_too_late() -> None:
    # Given a stalled drain whose heartbeat deadline comes a little after what an on-time next sweep needs
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1", heartbeat_timeout=3600)
    repair.autoscaling.action_timeout = 3600
    repair.records.create(
        record.model_copy(update={"heartbeat_deadline": record.started_at + timedelta(hours=1)})
    )
    repair.clock.current = (
        record.started_at + timedelta(hours=1) - 2 * INTERVAL - MARGIN - timedelta(seconds=60)
    )

    # When a sweep on time runs, it leaves it for the next
    late_sweep(repair, timedelta())
    assert repair.autoscaling.heartbeats == []

    # When the same sweep runs 90 s late, Then it heartbeats it: the next may be as late
    late_sweep(repair, timedelta(seconds=90))
    assert repair.autoscaling.heartbeats == [record.action]


def test_a_late_sweep_settles_a_stalled_action_whose_last_chance_a_next_sweep_as_late_would_miss() -> None:
    # Given a stalled drain 10 s before its last-chance point (the next sweep on time would settle it), kept alive
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1")
    end = record.global_deadline
    repair.clock.current = end - SETTLE_BEFORE - timedelta(seconds=10)
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100)))
    assert record.overdue(repair.clock.now(), GRACE)

    # When the sweep runs 150 s late (more than two margins: a next sweep as late would come after the end)
    counts = late_sweep(repair, timedelta(seconds=150))

    # Then it settles it now, with its failure result
    assert counts["LifecyclesSettled"] == 1
    assert len(repair.autoscaling.completed) == 1


def test_a_lifecycle_not_stalled_is_left_to_the_engines_guard_however_late_the_sweep() -> None:
    # Given a drain whose queue moves (its next poll not overdue), 10 s before its last-chance point
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1")
    end = record.global_deadline
    repair.clock.current = end - SETTLE_BEFORE - timedelta(seconds=10)
    moving = kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100))
    repair.records.create(moving.model_copy(update={"due_at": repair.clock.now() + timedelta(seconds=5)}))

    # When a late sweep runs, Then it completes nothing: the engine's guard completes it at its point
    counts = late_sweep(repair, timedelta(seconds=150))
    assert counts["LifecyclesSettled"] == 0
    assert repair.autoscaling.completed == []


class Lateness:
    """A part that remembers how late its sweep said it was."""

    def __init__(self) -> None:
        self.late: list[timedelta] = []

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        self.late.append(time.late)
        return {}


@pytest.mark.parametrize(
    ("fired", "late", "counted"),
    [
        (timedelta(seconds=-30), timedelta(seconds=30), 0),
        (timedelta(seconds=-150), timedelta(seconds=150), 1),
        (None, timedelta(), 0),
        (timedelta(seconds=20), timedelta(), 0),
    ],
    ids=["on-time", "late", "by-hand", "schedule-ahead-of-the-clock"],
)
def test_a_sweep_says_how_late_it_ran_and_counts_itself_late_past_a_heartbeat_margin(
    fired: timedelta | None, late: timedelta, counted: int
) -> None:
    # Given a sweeper whose schedule fired ``fired`` from now (None: an operator invoked it by hand, its event
    # without a schedule time; ahead: the schedule's clock a little ahead of the sweeper's)
    repair = Repair()
    part, metrics = Lateness(), FakeMetrics()
    sweeper = Sweeper(
        owner="stack-a",
        records=repair.records,
        clock=repair.clock,
        metrics=metrics,
        parts={"lifecycles": part},
        shares={},
        late_after=MARGIN,
    )

    # When it sweeps
    scheduled_at = None if fired is None else repair.clock.now() + fired
    report = sweeper.sweep(time_left=lambda: 300.0, scheduled_at=scheduled_at)

    # Then its parts are told how late it ran (not at all by hand, nor ahead of its schedule), its report says so
    # when it had a schedule, and only a sweep late past a margin is counted
    assert part.late == [late]
    if fired is None:
        assert "SweepLateSeconds" not in report
    else:
        assert report["SweepLateSeconds"] == int(late.total_seconds())
    if counted:
        assert metrics.counts["SweepsLate"] == counted
    else:
        assert "SweepsLate" not in metrics.counts
