"""Both sides of the last sweep's takeover (``LifecycleRepair._last_sweep``): a sweep that a later one can still follow
before the action's global timeout leaves a completer's claim until its invocation ends (its call may be on its way,
throttled: taken over, the action is called twice and the first told "no active lifecycle action"); one that no later
sweep can follow, as late as this one, takes over a claim older than a margin. No test showed either the first side or
the lateness in the second: every sweep taking over a claim older than a margin, or a late sweep taken for one on
schedule, passed them all.

Under the defaults the settle point is the last sweep's (``settle_before``: an interval, the schedule's minute and a
margin), and every settling sweep is the last: a sweep a later one can follow settles only where the settle point comes
earlier, set by the engine's redelivery (here a work visibility timeout of 420 s: 480 s before the global timeout)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.engine import claimed_for_completion
from nodecycle.domain.model import Step
from nodecycle.domain.sweep.sweep_time import SweepTime
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair, stalled_at_its_last_chance

SETTLE_BEFORE = (
    INTERVAL + 3 * MARGIN
)  # the engine's margin and redelivery (60 s and 420 s): past the sweep's 420 s
INVOCATION = 600.0  # seconds the engine's completer had left when it claimed (its calls throttled, retried)


def claimed_100_s_ago(repair: Repair) -> str:
    """A lifecycle at its completion at a sweep 450 s before its global timeout, past its settle point and before the
    last sweep's, claimed by the engine's completer 100 s ago (more than a margin) with its invocation still running;
    its id."""
    record_id = stalled_at_its_last_chance(repair, step=Step.COMPLETE)
    repair.clock.advance(-90)
    record = repair.records.get(record_id)
    assert record is not None
    at = repair.clock.now() - timedelta(seconds=100)
    claim = claimed_for_completion(record, at, at + timedelta(seconds=INVOCATION))
    assert repair.records.commit(claim, expected_seq=record.seq)
    return record_id


def sweep(repair: Repair, late: timedelta) -> dict[str, int]:
    counts = repair.part()(
        list(repair.records.open_records("stack-a")),
        repair.clock.now(),
        SweepTime(lambda: INTERVAL.total_seconds(), MARGIN, late=late),
    )
    return dict(counts)


def test_a_sweep_a_later_one_can_follow_leaves_a_claim_whose_completer_may_still_be_calling() -> None:
    # Given a completion claimed 100 s ago by a completer whose invocation runs on, and a sweep on schedule that the
    # next, an interval later and late in its minute, still follows a margin before the global timeout
    repair = Repair(settle_before=SETTLE_BEFORE)
    claimed_100_s_ago(repair)

    # When it runs
    counts = sweep(repair, late=timedelta())

    # Then it leaves the claim to its completer: no second call
    assert repair.autoscaling.completed == []
    assert counts["LifecyclesSettled"] == 0


def test_a_late_sweep_that_no_later_one_can_follow_takes_the_claim_over() -> None:
    # Given the same claim, and the same sweep delivered 40 s late: the next, as late, would come less than a margin
    # before the global timeout
    repair = Repair(settle_before=SETTLE_BEFORE)
    record_id = claimed_100_s_ago(repair)

    # When it runs
    counts = sweep(repair, late=timedelta(seconds=40))

    # Then it takes the claim over and completes the action
    assert counts["LifecyclesSettled"] == 1
    assert len(repair.autoscaling.completed) == 1
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.completed_at is not None
