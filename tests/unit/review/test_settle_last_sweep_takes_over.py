"""A completion claim is held until its completer's invocation ends, capped a margin before the action's global
timeout (engine.claim_ends). Under sweeps five minutes apart (the template's default) the sweeper's own Timeout (300 s)
is the interval: a settling sweep that crashed after its claim (out of memory, its runtime lost) holds the claim until
the end its invocation would have had, and a next sweep that starts a few seconds sooner after it than that (the
crashed sweep itself delivered late by its schedule) left the claim to the dead completer. The sweep after that came
past the global timeout, and Auto Scaling ended the action with the hook's default result. The last sweep that can
still settle the action before its global timeout takes the claim over (a second call is the lesser harm)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.sweep_time import SweepTime
from tests.unit.sweeper.test_sweeper import (
    INTERVAL,
    MARGIN,
    Repair,
    killed_at_its_completion,
    stalled_at_its_last_chance,
)

SWEEPER_TIMEOUT = 300.0  # the SweeperFunction's Timeout: the template's default interval (INTERVAL)
SCHEDULE_LATE = timedelta(seconds=10)  # how late the crashed sweep's schedule delivered it


def test_a_sweep_crashed_after_its_claim_is_taken_over_by_the_last_sweep_before_the_global_timeout() -> None:
    # Given sweeps five minutes apart, and a stalled drain at its last chance (kept alive so far) whose settling sweep,
    # delivered 10 s late, crashes after its claim at its completion call, with all of its 300 s left
    repair = Repair()
    record = repair.records.get(stalled_at_its_last_chance(repair))
    assert record is not None
    sweep = repair.part()
    with killed_at_its_completion(repair.autoscaling):
        sweep(
            list(repair.records.open_records("stack-a")),
            repair.clock.now(),
            SweepTime(lambda: SWEEPER_TIMEOUT, MARGIN, late=SCHEDULE_LATE),
        )
    assert repair.autoscaling.completed == []

    # When the sweeps after it run on schedule, five minutes apart, until the global timeout
    settled = 0
    repair.clock.advance((INTERVAL - SCHEDULE_LATE).total_seconds())
    while repair.clock.now() < record.global_deadline:
        counts = sweep(
            list(repair.records.open_records("stack-a")),
            repair.clock.now(),
            SweepTime(lambda: SWEEPER_TIMEOUT, MARGIN),
        )
        settled += counts["LifecyclesSettled"]
        repair.clock.advance(INTERVAL.total_seconds())

    # Then the last of them before the global timeout took the claim over and completed the action, as the sweeper
    # settles it (before: it left the claim, 10 s short of the crashed sweep's invocation end, and the next sweep came
    # 230 s after the global timeout)
    assert settled == 1
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    final = repair.records.get(record.id)
    assert final is not None
    assert final.completed_at is not None
    assert final.completed_at < record.global_deadline - MARGIN
