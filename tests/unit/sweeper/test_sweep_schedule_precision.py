"""The sweeper's schedule fires within its minute, not on its second: EventBridge runs a rate schedule "within that
minute, but not on the precise 0th second" (Amazon EventBridge User Guide, "Setting a schedule pattern for scheduled
rules"; EventBridge Scheduler: "60 second precision"). Two sweeps on schedule may then come an interval and 59 s apart.
The settings reckoned that slack as one heartbeat margin, which the template lets be 5 s: a stalled action's last
chance, and the shortest hook kept alive, were reckoned 55 s short (invariant 11)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.settings import Timing
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import PLAN, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import Repair

HOOK = 600
TIMING = Timing(heartbeat_margin_seconds=5)  # the template's least margin; the other settings their defaults
# The next tick fired 59 s into its minute, this one on its minute's first second
NEXT_TICK = timedelta(seconds=TIMING.sweep_interval_seconds + 59)


def five_second_margin() -> Repair:
    """The sweeper as the wiring builds it from TIMING."""
    return Repair(
        margin=timedelta(seconds=TIMING.heartbeat_margin_seconds),
        interval=timedelta(seconds=TIMING.sweep_interval_seconds),
        settle_before=timedelta(seconds=TIMING.settle_before_seconds),
    )


def test_a_stalled_action_is_settled_before_a_sweep_late_in_its_minute_comes_after_its_global_timeout() -> (
    None
):
    # Given a stalled drain kept alive so far under a hook of 600 s, 320 s before its global timeout: after the engine's
    # guard point by a 5 s margin (310 s), and a sweep on its minute's first second
    repair = five_second_margin()
    repair.autoscaling.action_timeout = HOOK
    record = make_record(
        PLAN,
        node="n1",
        seq=4,
        heartbeat_timeout=HOOK,
        heartbeat_deadline=T0 + timedelta(seconds=HOOK),
        global_deadline=T0 + 100 * timedelta(seconds=HOOK),
    )
    repair.clock.current = record.global_deadline - timedelta(seconds=320)
    record = kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100))
    assert repair.records.create(
        record.model_copy(update={"due_at": repair.clock.now() - timedelta(minutes=10)})
    )

    # When that sweep runs, and the next fires 59 s into its minute
    first = repair.run()
    repair.clock.current += NEXT_TICK
    second = repair.run()

    # Then one of them settled the action before its global timeout: Auto Scaling did not end it with the hook's
    # default result
    assert repair.clock.now() > record.global_deadline
    assert (first["LifecyclesSettled"] + second["LifecyclesSettled"], second["LifecyclesExpired"]) == (1, 0)
    assert [action.token for action, _ in repair.autoscaling.completed] == [record.token]


def test_a_stalled_action_under_the_shortest_hook_outlives_a_sweep_late_in_its_minute() -> None:
    # Given a stalled drain under the shortest hook these settings keep alive, heartbeated by a sweep on its minute's
    # first second
    hook = TIMING.min_heartbeat_timeout_seconds
    repair = five_second_margin()
    repair.autoscaling.action_timeout = hook
    record = make_record(
        PLAN,
        node="n1",
        heartbeat_timeout=hook,
        heartbeat_deadline=T0 + timedelta(seconds=hook),
        due_at=T0 - timedelta(minutes=10),
    )
    assert repair.records.create(record)
    repair.clock.current = T0 + timedelta(seconds=10)
    repair.run()

    # When the next sweep fires 59 s into its minute
    repair.clock.current += NEXT_TICK
    counts = repair.run()

    # Then it finds the action alive, and keeps it so
    assert counts["LifecyclesExpired"] == 0
    assert repair.autoscaling.expires_at(record.token) > repair.clock.now()
