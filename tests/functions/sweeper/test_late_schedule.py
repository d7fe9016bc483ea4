"""The sweeper function on moto, invoked by a schedule event that fired minutes before (EventBridge delivered it
late: the sweeper throttled at its reserved concurrency, the event retried): the sweep says how late it ran and
counts itself late (its alarm), and a stalled action whose heartbeat timeout passed before it is told expired, not
settled."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType

import pytest

from nodecycle.domain.model import Step
from tests.functions.intake.conftest import HEARTBEAT_TIMEOUT
from tests.functions.sweeper.test_sweeper_function import invocation, record, store
from tests.support.emf import metric
from tests.support.events import happening_now, load_event
from tests.support.stack import Stack


def fired(ago: timedelta) -> dict[str, object]:
    """The schedule's event, fired ``ago`` before now."""
    event = happening_now(load_event("sweeper-schedule.json"))
    return {**event, "time": (datetime.now(UTC) - ago).strftime("%Y-%m-%dT%H:%M:%SZ")}


def test_a_sweep_delivered_on_time_is_not_late(
    sweeper: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # When the schedule's event comes as it fired
    report = sweeper.handler(fired(timedelta()), invocation())

    # Then the sweep's report says it ran on time, and it is not counted late
    assert abs(report["SweepLateSeconds"]) <= 2
    assert metric(capsys.readouterr().out, "SweepsLate") == 0


def test_a_late_sweep_says_so_and_tells_a_stalled_action_that_timed_out_before_it_as_expired(
    sweeper: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a stalled lifecycle a minute before its action's global timeout whose heartbeat deadline passed before
    # the sweep (the sweep before kept it alive; this one came 4 minutes late): Auto Scaling has no action for it
    started = datetime.now(UTC) - timedelta(seconds=HEARTBEAT_TIMEOUT * 100 - 60)
    stuck = record("i-0aaaaaaaaaaaaaaa8", Step.RELEASE_EIP, started + timedelta(minutes=1), started)
    stuck = stuck.model_copy(update={"heartbeat_deadline": datetime.now(UTC) - timedelta(seconds=30)})
    assert store(stack).create(stuck)

    # When the schedule's event comes 4 minutes after it fired
    late = timedelta(minutes=4)
    report = sweeper.handler(fired(late), invocation())

    # Then the sweep's report says how late it ran, and one late past the heartbeat margin (60 s) is counted
    assert abs(report["SweepLateSeconds"] - late.total_seconds()) <= 2
    output = capsys.readouterr().out
    assert metric(output, "SweepsLate") == 1
    # And the action is told expired (its alarm), not settled by the sweeper
    assert (report["LifecyclesExpired"], report["LifecyclesSettled"]) == (1, 0)
    swept = store(stack).get(stuck.id)
    assert swept is not None
    assert swept.outcome == "action-expired"
    assert metric(output, "LifecycleActionsExpired") == 1
    assert metric(output, "GlobalTimeoutsNear") == 0


def test_a_sweep_within_its_schedules_minute_is_not_late_under_a_short_heartbeat_margin(
    sweeper: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a heartbeat margin of 5 s (the template's least), and a schedule's event whose time is 40 s before the
    # sweep: EventBridge runs a rate schedule "within that minute, but not on the precise 0th second" (Amazon
    # EventBridge User Guide, scheduled rules), which the timing allows for (Timing.sweep_lateness_seconds: a minute)
    monkeypatch.setenv("NODECYCLE_HEARTBEAT_MARGIN_SECONDS", "5")

    # When the sweep runs
    report = sweeper.handler(fired(timedelta(seconds=40)), invocation())

    # Then it says how long after its event's time it ran, but it is not counted late (its alarm): no action whose
    # hook the settings allow can lapse for a sweep within its schedule's minute
    assert abs(report["SweepLateSeconds"] - 40) <= 2
    assert metric(capsys.readouterr().out, "SweepsLate") == 0
