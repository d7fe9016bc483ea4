"""Which sweep is the last that can settle an action before its global timeout (``LifecycleRepair._last_sweep``: the one
that takes over a completion's claim a margin after it was made, not at its completer's invocation end), reckoned with
the real ``Timing``.

EventBridge runs a rate schedule "within that minute, but not on the precise 0th second" (Amazon EventBridge User
Guide, scheduled rules): a sweep that fired early in its minute may be followed by one that fires late in its own, an
interval and up to a minute later, whatever either event's ``time`` says. The settlement point allows for that minute
(``Timing.sweep_lateness_seconds`` in ``settle_before_seconds``); the last sweep's reckoning did not: it took the next
sweep for an interval later exactly, left a dead completer's claim to it, and the next sweep came within the last
margin before the global timeout (what a completion takes), or after it. Under intervals shorter than the sweeper's
timeout the next sweep comes after this one ends (``LifecycleRepair._overrun``), which the reckoning ignored too."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.engine import claimed_for_completion
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.settings import Timing
from tests.unit.sweeper.test_sweeper import Repair, stalled_at_its_last_chance

SWEEPER_TIMEOUT = 300.0  # the SweeperFunction's Timeout
COMPLETER_INVOCATION = timedelta(seconds=600)  # what the dead completer's invocation had left when it claimed


def repair_as_configured(timing: Timing) -> Repair:
    return Repair(
        margin=timedelta(seconds=timing.heartbeat_margin_seconds),
        interval=timedelta(seconds=timing.sweep_interval_seconds),
        settle_before=timedelta(seconds=timing.settle_before_seconds),
        lateness=timedelta(seconds=timing.sweep_lateness_seconds),
    )


def claimed_by_a_dead_completer(repair: Repair, before_global_timeout: timedelta) -> str:
    """A stalled lifecycle at its completion, claimed 100 s before ``before_global_timeout`` (now) by a completer that
    died since (its runtime lost), its invocation's end still ahead; its id."""
    record_id = stalled_at_its_last_chance(repair, step=Step.COMPLETE)
    record = repair.records.get(record_id)
    assert record is not None
    repair.clock.current = record.global_deadline - before_global_timeout
    at = repair.clock.now() - timedelta(seconds=100)
    assert repair.records.commit(
        claimed_for_completion(record, at, at + COMPLETER_INVOCATION), expected_seq=record.seq
    )
    return record_id


def sweep(repair: Repair, time_left: float = SWEEPER_TIMEOUT) -> dict[str, int]:
    counts = repair.part()(
        list(repair.records.open_records("stack-a")),
        repair.clock.now(),
        SweepTime(lambda: time_left, repair.margin),
    )
    return dict(counts)


def test_a_dead_completers_claim_is_taken_over_by_the_sweep_the_next_may_follow_a_minute_late() -> None:
    # Given the defaults (sweeps five minutes apart, a margin of 60 s), and a completion claimed by a completer that
    # died, at a sweep 370 s before the global timeout that fired at the start of its minute: the next fires 300 s
    # later, and up to 59 s later still, late in its own minute
    timing = Timing()
    repair = repair_as_configured(timing)
    record_id = claimed_by_a_dead_completer(repair, timedelta(seconds=370))
    record = repair.records.get(record_id)
    assert record is not None

    # When that sweep runs, then the next, late in its minute
    sweep(repair)
    repair.clock.advance(timing.sweep_interval_seconds + 59)
    sweep(repair)

    # Then the action was completed a margin before its global timeout at least (before: the first sweep left the
    # claim, and the second completed it 11 s before the global timeout, less than a completion's margin)
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.completed_at is not None
    assert settled.completed_at <= record.global_deadline - timedelta(seconds=timing.heartbeat_margin_seconds)


def test_a_dead_completers_claim_is_taken_over_by_a_sweep_that_may_outlast_the_interval() -> None:
    # Given sweeps a minute apart (the template's SweepIntervalMinutes=1), and a completion claimed by a completer
    # that died, at a sweep 200 s before the global timeout with its whole 300 s ahead: the next sweep starts once this
    # one ends (the ticks meanwhile are throttled), up to 100 s after the global timeout
    timing = Timing(sweep_interval_minutes=1)
    repair = repair_as_configured(timing)
    record_id = claimed_by_a_dead_completer(repair, timedelta(seconds=200))

    # When that sweep runs
    counts = sweep(repair)

    # Then it takes the claim over and completes the action (before: it left the claim to its dead completer, as
    # if the next sweep came a minute later)
    assert counts["LifecyclesSettled"] == 1
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.completed_at is not None
