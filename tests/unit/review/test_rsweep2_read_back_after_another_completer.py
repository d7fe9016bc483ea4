"""A sweep's write whose answer is lost (past the action found gone; a settlement's claim) is read back, and its page
counted when the record reads as it wrote it (``engine.landed_after_all``). Another completer of ours (the engine's
run, its guard near the global timeout) may have committed meanwhile, from the same record, and counted the page
itself: the sweep's write then did not land, and its read-back, finding the other writer's record, must not count the
page a second time (LifecycleActionsExpired and GlobalTimeoutsNear page once per action)."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from nodecycle.domain.engine import Outcome, action_lapsed, advance, gone_counted
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair, stalled_at_its_last_chance


def lost_to_another_writer(repair: Repair, write: LifecycleRecord) -> None:
    """The next commit of ``repair``'s records raises without landing: ``write`` (another completer's, counted by it)
    landed first, a little later by the clock (its run's own)."""
    commit = repair.records.commit

    def lost(record: LifecycleRecord, expected_seq: int) -> bool:
        repair.records.commit = commit  # type: ignore[method-assign]
        assert commit(write, expected_seq)
        assert not commit(record, expected_seq)  # (its condition fails now: the answer lost says nothing)
        raise TransientError("writing a lifecycle record: InternalServerError")

    repair.records.commit = lost  # type: ignore[method-assign]


def test_a_sweeps_lost_commit_past_a_gone_action_is_not_paged_again_when_the_engines_commit_landed() -> None:
    # Given a drain at its eviction whose action is gone, due at a sweep's keep-alive; and the engine's run of it,
    # which finds the action gone too, commits past it and pages it, while the sweep's own commit is lost
    repair = Repair()
    repair.autoscaling.active = False
    drain = make_record(PLAN, Step.EVICT, node="n1")
    repair.records.create(drain)
    repair.clock.current = drain.heartbeat_deadline - MARGIN
    engine_at = repair.clock.now() + timedelta(milliseconds=40)
    engines = advance(drain, action_lapsed(drain, engine_at, repair.autoscaling, repair.records), engine_at)
    assert engines.outcome == "action-expired"
    gone_counted(
        repair.records, drain, engines, True, repair.metrics
    )  # (as the engine counts once it landed)
    lost_to_another_writer(repair, engines)

    # When that sweep and the next run
    with contextlib.suppress(Exception):  # (the part's failure: the sweeper logs it)
        repair.run()
    repair.clock.current += INTERVAL
    with contextlib.suppress(Exception):
        repair.run()

    # Then the action was paged once (the engine's)
    assert repair.metrics.counts["LifecycleActionsExpired"] == 1


def test_a_settlements_lost_claim_is_not_paged_again_when_the_engines_guard_landed() -> None:
    # Given a stalled drain at the last sweep before its action's global timeout; and the engine's guard, which
    # commits its way to the completion and pages it, while the sweep's claim is lost
    repair = Repair()
    record_id = stalled_at_its_last_chance(repair)
    read = repair.records.get(record_id)
    assert read is not None
    guard_at = repair.clock.now() + timedelta(milliseconds=40)
    guards = advance(read, Outcome.goto(Step.COMPLETE, outcome="global-timeout-near"), guard_at)
    repair.metrics.count("GlobalTimeoutsNear")  # (as the engine counts once its guard's commit landed)
    lost_to_another_writer(repair, guards)

    # When that sweep and the next run
    with contextlib.suppress(Exception):
        repair.run()
    repair.clock.advance(INTERVAL.total_seconds())
    with contextlib.suppress(Exception):
        repair.run()

    # Then the action was paged near its global timeout once (the guard's)
    assert repair.metrics.counts.get("GlobalTimeoutsNear") == 1
