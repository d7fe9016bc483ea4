"""The shortest heartbeat timeout the settings keep alive while a queue stalls (``Timing.min_heartbeat_timeout_seconds``,
what intake and ``nodecycle doctor`` accept). Under such a hook the sweeper heartbeats a stalled action at every sweep,
and the time between two heartbeats is the interval plus how much later into its sweep the second reaches it than the
first did. Reckoned as an interval and a margin (360 s with the defaults), the margin had to cover that too, and did
not when the second sweep was slowed (Auto Scaling throttled: botocore's retries back a heartbeat off for tens of
seconds; or the orphans' keep-alive before the lifecycles' part using its time, up to 125 s of a 300 s sweep): the
actions the sweep reached more than a margin later than the one before lapsed, undrained (invariant 11). The minimum
now counts how far into its run a sweep may reach an action, its 300 s timeout less its 45 s reserve (615 s with the
defaults)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.model import ActionRef
from nodecycle.settings import Timing
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_orphans import AMPLE
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair

THROTTLED = 30  # seconds a heartbeat takes under throttling (botocore's standard retries and their backoff)


def two_sweeps_the_second_throttled(hook: int) -> Repair:
    """Three stalled drains under hooks of ``hook`` s, heartbeated by a sweep 10 s after they started (each call
    at once), then by the next, an interval later, whose heartbeats each take THROTTLED seconds."""
    repair = Repair()
    repair.autoscaling.action_timeout = hook
    for n, token in enumerate("abc", start=1):
        repair.autoscaling.issue(token, f"i-{n}")
        record = make_record(
            PLAN,
            node=f"n{n}",
            id=f"i-{n}/terminate/{token}",
            instance_id=f"i-{n}",
            token=token,
            heartbeat_timeout=hook,
            heartbeat_deadline=T0 + timedelta(seconds=hook),
        )
        assert repair.records.create(record)
    repair.clock.current = T0 + timedelta(seconds=10)
    repair.run()
    heartbeat = repair.autoscaling.heartbeat

    def throttled(action: ActionRef) -> bool:
        repair.clock.advance(THROTTLED)
        return heartbeat(action)

    repair.autoscaling.heartbeat = throttled  # type: ignore[method-assign]
    repair.clock.current = T0 + timedelta(seconds=10) + INTERVAL
    repair.part()(list(repair.records.open_records("stack-a")), repair.clock.now(), AMPLE)
    return repair


def test_a_stalled_action_under_the_doctors_600_s_hook_outlives_a_throttled_sweep() -> None:
    repair = two_sweeps_the_second_throttled(600)
    assert [repair.autoscaling.expires_at(t) > repair.clock.now() for t in "abc"] == [True] * 3


def test_a_stalled_action_under_the_shortest_hook_the_settings_accept_outlives_a_throttled_sweep() -> None:
    timing = Timing()  # the template's defaults, the Repair's
    assert (timing.sweep_interval_seconds, timing.heartbeat_margin_seconds) == (
        INTERVAL.seconds,
        MARGIN.seconds,
    )
    shortest = timing.min_heartbeat_timeout_seconds  # 615 s
    repair = two_sweeps_the_second_throttled(shortest)
    assert [repair.autoscaling.expires_at(t) > repair.clock.now() for t in "abc"] == [True] * 3
