"""Sweeps that run longer than their interval. The sweeper runs one invocation at a time (reserved concurrency 1)
for up to its 300 s timeout, and SweepIntervalMinutes may be 1 to 4: a tick that comes while a sweep runs is
throttled, and Lambda tries it again with a back-off ("from 1 second after the first attempt to a maximum of 5
minutes", https://docs.aws.amazon.com/lambda/latest/dg/invocation-async-error-handling.html), so the next sweep
starts once this one has ended, and then up to an interval later (the next tick, which finds the function free).
Two intervals ahead, what the lifecycles' part takes the next sweep to be, is shorter than that: a stalled action
whose heartbeat deadline falls between the two lapsed with time left before its global timeout (invariant 11)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import PLAN, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import MARGIN, Repair

INTERVAL = timedelta(minutes=1)  # SweepIntervalMinutes=1
HOOK = 600  # seconds: the doctor's advice, well above the settings' minimum for a 1-minute interval (210 s)
LONG = timedelta(seconds=255)  # a sweep that runs until its reserve (300 s less 45 s): throttled, a backlog


def sweep(repair: Repair, left: float) -> Counts:
    """The lifecycles' part of a sweep that reaches the lifecycle with ``left`` seconds of its invocation left."""
    time = SweepTime(lambda: left, timedelta())
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


@pytest.mark.xfail(
    strict=True,
    reason="a stalled action's last chance is reckoned an interval (and this sweep's lateness) ahead, not this sweep's "
    "overrun: allowing for the worst case would settle every stalled action minutes early at every 1-minute sweep "
    "(and in the sandbox, whose sweeper keeps its 300 s timeout under a compressed schedule and global timeouts, at "
    "once); left to the settings (settle_before), which do not count the sweep's own length",
)
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
