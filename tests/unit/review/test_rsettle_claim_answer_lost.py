"""A sweep's settlement counts ``GlobalTimeoutsNear`` (a page: once per action) once its claim lands
(``LifecycleRepair._settle``). A claim that lands with its answer lost and then raises (a 500 at every attempt after the
first landed; a retry after a read timeout the sweep's time does not allow: CallOutOfTime) is read back, as the
engine's commits are (``engine.gone_counted``): the next sweep settles the action again under the claim's mark, and
counts nothing. (A sweep killed at that point runs nothing more: see test_rsweep_killed_at_each_call.)"""

from __future__ import annotations

import contextlib

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.policy import ActionResult
from tests.unit.sweeper.test_sweeper import INTERVAL, Repair, stalled_at_its_last_chance


def answer_lost_at_the_first_commit(repair: Repair, *, landed: bool) -> None:
    """The next commit of ``repair``'s records raises after it ``landed`` (or before, not landed); the rest answer."""
    commit = repair.records.commit

    def lost(record: LifecycleRecord, expected_seq: int) -> bool:
        repair.records.commit = commit  # type: ignore[method-assign]
        if landed:
            assert commit(record, expected_seq)
        raise TransientError("writing a lifecycle record: InternalServerError")

    repair.records.commit = lost  # type: ignore[method-assign]


def test_a_settlements_claim_that_landed_with_its_answer_lost_pages_it_once() -> None:
    # Given a stalled drain at the last sweep before its action's global timeout, whose settlement's claim (the sweep's
    # first commit of it) lands but raises
    repair = Repair()
    record_id = stalled_at_its_last_chance(repair)
    answer_lost_at_the_first_commit(repair, landed=True)

    # When that sweep and the next run
    with contextlib.suppress(Exception):  # (the part's failure: the sweeper logs it)
        repair.run()
    repair.clock.advance(INTERVAL.total_seconds())
    repair.run()

    # Then the action was completed once, and counted near its global timeout once
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.completed_at is not None
    assert repair.metrics.counts.get("GlobalTimeoutsNear") == 1


def test_a_settlements_claim_that_raised_without_landing_is_paged_by_the_next_sweeps_claim_alone() -> None:
    # Given the same drain, whose settlement's claim raises without landing
    repair = Repair()
    stalled_at_its_last_chance(repair)
    answer_lost_at_the_first_commit(repair, landed=False)

    # When that sweep and the next run
    with contextlib.suppress(Exception):
        repair.run()
    assert repair.metrics.counts.get("GlobalTimeoutsNear") is None  # (read back: not written)
    repair.clock.advance(INTERVAL.total_seconds())
    repair.run()

    # Then the next sweep's claim counted it, once
    assert repair.metrics.counts.get("GlobalTimeoutsNear") == 1
