"""Sweeps that run longer than their interval. The sweeper runs one invocation at a time (reserved concurrency 1)
for up to its 300 s timeout, and SweepIntervalMinutes may be 1 to 4: a tick that comes while a sweep runs is
throttled, and Lambda tries it again with a back-off ("from 1 second after the first attempt to a maximum of 5
minutes", https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html), so the next sweep
starts once this one has ended, and then up to an interval later (the next tick, which finds the function free).
Two intervals ahead, what the lifecycles' part takes the next sweep to be, is shorter than that: a stalled action
whose heartbeat deadline falls between the two lapsed with time left before its global timeout (invariant 11). Its last
chance, reckoned an interval after the sweep began, came past its global timeout too: the sweep now ends in time for
the next to come before it, or settles the action when that is within its reserve."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import pytest

from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.sweep.sweep_time import RESERVE, SHARES, SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper, SweepFailed, SweepPart
from tests.support.fakes import T0, FakeClock, FakeMetrics, InMemoryRecords
from tests.unit.foundation.test_engine import PLAN, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import MARGIN, Repair

INTERVAL = timedelta(minutes=1)  # SweepIntervalMinutes=1
HOOK = 600  # seconds: under the settings' minimum for a 1-minute interval (675 s), as each sweep reaches it first
LONG = timedelta(seconds=255)  # a sweep that runs until its reserve (300 s less 45 s): throttled, a backlog


def sweep(repair: Repair, left: float, time: SweepTime | None = None) -> Counts:
    """The lifecycles' part of a sweep that reaches the lifecycle with ``left`` seconds of its invocation left (and
    the sweeper's reserve)."""
    time = time or SweepTime(lambda: left, RESERVE)
    return repair.part()(list(repair.records.open_records("stack-a")), repair.clock.now(), time)


def one_minute_sweeps() -> Repair:
    # (as settings: settle_before is the later of margin + redelivery (60 + 150) and the interval + 2 margins)
    repair = Repair(interval=INTERVAL, settle_before=timedelta(seconds=210))
    repair.autoscaling.action_timeout = HOOK
    return repair


def test_a_stalled_action_outlives_one_minute_sweeps_that_each_run_to_their_reserve() -> None:
    # Given a stalled drain under a hook of 600 s (its queue stopped: only the sweeper heartbeats it), its action
    # started at T0, and 1-minute sweeps that each run 255 s: the ticks that come meanwhile are throttled, and
    # the next sweep starts once the one before ended, up to an interval later
    repair = one_minute_sweeps()
    record = make_record(
        PLAN,
        node="n1",
        heartbeat_timeout=HOOK,
        heartbeat_deadline=T0 + timedelta(seconds=HOOK),
        due_at=T0 - timedelta(minutes=10),
    )
    assert repair.records.create(record)

    # When the sweeps run, each reaching the lifecycle as it begins, with its whole invocation ahead of it
    repair.clock.current = T0 + timedelta(seconds=10)
    for _ in range(8):
        counts = sweep(repair, left=300)
        # Then no sweep finds the action lapsed: each one heartbeats it before the next can come too late
        assert counts["LifecyclesExpired"] == 0, f"lapsed by {repair.clock.now() - T0}"
        assert repair.autoscaling.expires_at("token") > repair.clock.now() + LONG + INTERVAL + MARGIN
        repair.clock.current += LONG + INTERVAL


def test_an_action_beyond_this_sweep_and_an_interval_is_left_to_the_next_sweep() -> None:
    # Given 1-minute sweeps and an action whose heartbeat deadline comes after this sweep's invocation could end,
    # an interval and a margin
    repair = one_minute_sweeps()
    record = make_record(
        PLAN,
        node="n1",
        heartbeat_timeout=HOOK,
        heartbeat_deadline=T0 + timedelta(seconds=HOOK),
        due_at=T0 + timedelta(minutes=30),
    )
    assert repair.records.create(record)
    repair.clock.current = T0 + timedelta(seconds=HOOK) - timedelta(seconds=300) - INTERVAL - MARGIN
    repair.clock.advance(-1)

    # When a sweep runs, Then it does not heartbeat it yet (at most one heartbeat per action per sweep)
    sweep(repair, left=300)
    assert repair.autoscaling.heartbeats == []


def stalled_before_its_last_chance(repair: Repair, by: timedelta) -> LifecycleRecord:
    """A stalled drain kept alive so far under a hook of 600 s, ``by`` before its last chance as an on-time 1-minute
    schedule reckons it (settle_before, 210 s before its global timeout)."""
    record = make_record(
        PLAN,
        node="n1",
        seq=4,
        heartbeat_timeout=HOOK,
        heartbeat_deadline=T0 + timedelta(seconds=HOOK),
        global_deadline=T0 + 100 * timedelta(seconds=HOOK),
    )
    repair.clock.current = record.global_deadline - repair.settle_before - by
    record = kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100))
    assert repair.records.create(
        record.model_copy(update={"due_at": repair.clock.now() - timedelta(minutes=10)})
    )
    return record


def test_a_stalled_action_is_settled_before_a_sweep_that_runs_to_its_reserve_pushes_the_next_past_its_end() -> (
    None
):
    # Given a stalled drain kept alive so far under a hook of 600 s, 215 s before its global timeout: just before
    # its last chance as an on-time 1-minute schedule reckons it (settle_before, 210 s), and 1-minute sweeps that
    # each run 255 s, so that the next one comes up to 315 s later, after that global timeout
    repair = one_minute_sweeps()
    record = make_record(
        PLAN,
        node="n1",
        seq=4,
        heartbeat_timeout=HOOK,
        heartbeat_deadline=T0 + timedelta(seconds=HOOK),
        global_deadline=T0 + 100 * timedelta(seconds=HOOK),
    )
    repair.clock.current = record.global_deadline - timedelta(seconds=215)
    record = kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100))
    assert repair.records.create(
        record.model_copy(update={"due_at": repair.clock.now() - timedelta(minutes=10)})
    )

    # When that sweep runs, with its whole invocation ahead of it, and the next one an interval after it ended
    first = sweep(repair, left=300)
    repair.clock.current += LONG + INTERVAL
    second = sweep(repair, left=300)

    # Then the first settles the action itself, before its global timeout: Auto Scaling does not end it with the
    # hook's default result
    assert (first["LifecyclesSettled"], second["LifecyclesExpired"]) == (1, 0)
    assert [action.token for action, _ in repair.autoscaling.completed] == [record.token]


def test_a_sweep_that_may_run_past_a_stalled_actions_last_chance_ends_in_time_for_the_next_to_settle_it() -> (
    None
):
    # Given a stalled drain 90 s before its last chance as an on-time 1-minute schedule reckons it: further than a
    # reserve, near enough for a sweep with its whole invocation ahead of it to run past
    repair = one_minute_sweeps()
    record = stalled_before_its_last_chance(repair, by=timedelta(seconds=90))

    # When a sweep reaches it with its whole invocation ahead of it
    left = 300.0
    time = SweepTime(lambda: left, RESERVE)
    first = sweep(repair, left, time)

    # Then it does not settle it early, but ends in time: no item starts once less than a reserve is left before that
    # last chance, so that the next sweep, an interval after it, comes before it
    assert (first["LifecyclesSettled"], repair.autoscaling.completed) == (0, [])
    assert time.sweep_left() == pytest.approx(90)
    left -= 90 - RESERVE.total_seconds() + 1
    assert not time.enough()

    # And the next sweep, an interval after this one's end, settles it before its global timeout
    repair.clock.current += timedelta(seconds=90) + INTERVAL
    second = sweep(repair, left=300)
    assert (second["LifecyclesSettled"], second["LifecyclesExpired"]) == (1, 0)
    assert [action.token for action, _ in repair.autoscaling.completed] == [record.token]


def test_a_sweep_that_ends_before_an_interval_has_passed_leaves_a_stalled_action_to_its_last_chance() -> None:
    # Given the same stalled drain, and a sweep that has less than an interval left (its last minute)
    repair = one_minute_sweeps()
    stalled_before_its_last_chance(repair, by=timedelta(seconds=5))
    time = SweepTime(lambda: 55.0, RESERVE)

    # When it reaches it, Then it neither settles it nor sets the sweep's end: the next sweep comes as its last chance
    # reckons
    assert sweep(repair, 55.0, time)["LifecyclesSettled"] == 0
    assert time.sweep_left() == 55.0


def test_the_parts_after_the_one_that_set_the_sweeps_end_keep_to_it() -> None:
    # Given the sweeper's parts with their shares, the lifecycles' setting the sweep's end 30 s ahead
    clock = FakeClock()
    began = clock.now()
    ran: list[str] = []

    def lifecycles(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        ran.append("lifecycles")
        time.end_within(30)
        return {}

    def part(name: str) -> SweepPart:
        def run(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
            ran.append(name)
            return {}

        return run

    names = ("orphans", "lifecycles", "adoptions", "addresses")
    sweeper = Sweeper(
        owner="stack-a",
        records=InMemoryRecords(),
        clock=clock,
        metrics=FakeMetrics(),
        parts={name: lifecycles if name == "lifecycles" else part(name) for name in names},
        shares=SHARES,
    )

    # When it sweeps with its whole invocation ahead of it, Then the parts after the lifecycles' are not started:
    # less than a reserve is left before the end they set
    with pytest.raises(SweepFailed, match=r"want of time: adoptions, addresses"):
        sweeper.sweep(time_left=lambda: 300 - (clock.now() - began).total_seconds())
    assert ran == ["orphans", "lifecycles"]
