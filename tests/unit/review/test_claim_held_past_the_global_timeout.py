"""A completion claim held while its completer's invocation lasts (``until``) must not outlast the action it is for.
Under sweeps a minute apart the sweeper settles a stalled action some 210 s before its global timeout (the later of
an interval and two margins, and a margin and a redelivery), with up to 300 s of its invocation left (its Timeout):
a sweep that crashed after its claim (out of memory, its runtime lost) left a claim that every later sweep, and the
engine's watch, left to it until after the global timeout, and Auto Scaling ended the action with its default
result (the alarm). The claim is taken over a margin before the global timeout at the latest."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from nodecycle.domain.engine import claim_ends, claimed_for_completion
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.sweep_time import SweepTime
from tests.unit.foundation.test_engine import PLAN, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import Killed, Repair

MARGIN = timedelta(seconds=60)  # HeartbeatMarginSeconds' default
INTERVAL = timedelta(minutes=1)  # SweepIntervalMinutes 1 (the template's rate(1 minute))
REDELIVERY = timedelta(seconds=150)  # WorkVisibilityTimeoutSeconds' default
SETTLE_BEFORE = max(MARGIN + REDELIVERY, INTERVAL + 2 * MARGIN)  # as settings.settle_before_seconds: 210 s
SWEEPER_TIMEOUT = 300.0  # the SweeperFunction's Timeout


def test_a_claim_whose_invocation_outlasts_the_action_may_be_taken_over_a_margin_before_its_global_timeout() -> (
    None
):
    # Given a record claimed 210 s before its action's global timeout by a completer with 300 s of its invocation left
    record = make_record(PLAN, Step.COMPLETE, node="n1", seq=4, heartbeat_timeout=600)
    now = record.global_deadline - SETTLE_BEFORE
    claimed = claimed_for_completion(record, now, now + timedelta(seconds=SWEEPER_TIMEOUT), by="sweeper")

    # Then the claim may be taken over a margin before the global timeout, not after it; a claim whose invocation ends
    # sooner, when that ends; and one within a margin of its making, a margin after it
    assert claim_ends(claimed, MARGIN) == record.global_deadline - MARGIN
    sooner = claimed_for_completion(record, now, now + timedelta(seconds=100))
    assert claim_ends(sooner, MARGIN) == now + timedelta(seconds=100)
    late = record.global_deadline - timedelta(seconds=10)
    assert claim_ends(claimed_for_completion(record, late, late + MARGIN), MARGIN) == late + MARGIN


def test_a_sweep_that_crashed_after_its_claim_is_taken_over_by_a_later_sweep_before_the_global_timeout() -> (
    None
):
    # Given sweeps a minute apart, and a stalled drain at its last chance (kept alive so far) whose settling sweep
    # crashes after its claim, at its completion call, with most of its 300 s left
    repair = Repair(margin=MARGIN, interval=INTERVAL, settle_before=SETTLE_BEFORE)
    repair.autoscaling.action_timeout = 600
    record = make_record(PLAN, Step.EVICT, node="n1", seq=4, heartbeat_timeout=600)
    repair.clock.current = record.global_deadline - SETTLE_BEFORE
    assert repair.records.create(
        kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100))
    )
    complete = repair.autoscaling.complete

    def crashed(action: ActionRef, result: ActionResult) -> bool:
        raise Killed

    repair.autoscaling.complete = crashed  # type: ignore[method-assign]
    sweep = repair.part()
    with contextlib.suppress(Killed):
        sweep(
            list(repair.records.open_records("stack-a")), repair.clock.now(), SweepTime(lambda: 290, MARGIN)
        )
    repair.autoscaling.complete = complete  # type: ignore[method-assign]

    # When the sweeps after it run, a minute apart, until the global timeout
    settled = 0
    while repair.clock.now() + INTERVAL < record.global_deadline:
        repair.clock.advance(INTERVAL.total_seconds())
        counts = sweep(
            list(repair.records.open_records("stack-a")),
            repair.clock.now(),
            SweepTime(lambda: SWEEPER_TIMEOUT, MARGIN),
        )
        settled += counts["LifecyclesSettled"]

    # Then one of them took the claim over and completed the action before its global timeout, as the sweeper
    # settles it (before: every one left it to the crashed sweep's claim, held until 90 s past the global timeout)
    assert settled == 1
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    final = repair.records.get(record.id)
    assert final is not None
    assert final.completed_at is not None
    assert final.completed_at < record.global_deadline
