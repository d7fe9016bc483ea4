"""The sweeper and a lifecycle at its completion: what it records when Auto Scaling no longer has the action."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.completion import SETTLED_ELSEWHERE
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import AccessRefused
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import GRACE, MARGIN, Repair


def test_an_overdue_completion_whose_call_landed_before_its_run_died_is_not_recorded_as_an_expired_action() -> (
    None
):
    # Given a lifecycle at its completion whose run completed the action with ABANDON (Auto Scaling took the
    # call) and died before its commit; its message was then lost (the redelivery dead-lettered), so the
    # lifecycle is overdue, and its heartbeat deadline comes before the next sweep
    repair = Repair()
    record = make_record(PLAN, Step.COMPLETE, node="n1", result=ActionResult.ABANDON)
    repair.records.create(record)
    repair.autoscaling.complete(record.action, ActionResult.ABANDON)
    repair.clock.current = T0 + GRACE + timedelta(seconds=30)
    assert repair.clock.now() > record.heartbeat_deadline - 2 * MARGIN

    # When the sweeper runs (its heartbeat is refused: "no active lifecycle action"), then whatever it sent
    counts = repair.run()
    engine = repair.engine(cleanup=lambda record, now: Outcome.next())
    for sent in repair.queues.take():
        engine.handle(sent.message)

    # Then the lifecycle is not recorded as one whose action expired (it may have: Auto Scaling's answer cannot
    # tell that from a completion that landed): its completion ran again, found the action settled, and says
    # so, with the result it was to complete it with; nothing was completed twice
    moved = repair.records.get(record.id)
    assert moved is not None
    assert counts["LifecyclesResumed"] == 1
    assert moved.outcome != "action-expired"
    assert (moved.result, moved.extra.get(SETTLED_ELSEWHERE)) == (ActionResult.ABANDON, True)
    assert moved.completed_at is not None
    assert "LifecycleActionsExpired" not in repair.metrics.counts
    assert len(repair.autoscaling.completed) == 1


def test_a_stalled_lifecycle_is_resumed_though_the_sweepers_heartbeat_is_refused_and_the_sweep_fails() -> (
    None
):
    # Given a lifecycle whose message was lost (overdue), its heartbeat deadline before the next sweep, and
    # Auto Scaling refusing the sweeper's heartbeats (its role's policy edited) though the drain's are allowed
    repair = Repair()
    record = make_record(PLAN, Step.EVICT, node="n1")
    repair.records.create(record)
    repair.clock.current = T0 + GRACE + timedelta(seconds=30)

    def refused(action: ActionRef) -> bool:
        raise AccessRefused("recording a lifecycle heartbeat", "AccessDenied", "explicit deny")

    repair.autoscaling.heartbeat = refused  # type: ignore[method-assign]

    # When the sweeper runs
    with pytest.raises(SweepFailed):
        repair.run()

    # Then the lifecycle was resumed all the same (its step, run by the drain function, heartbeats the action
    # itself), and the sweep failed for the refusal (the sweeper's Errors alarm)
    moved = repair.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.seq, moved.resumes) == (Step.EVICT, record.seq + 1, 1)
    (sent,) = repair.queues.take()
    assert (sent.message.step, sent.message.seq) == (Step.EVICT, record.seq + 1)
    assert repair.metrics.counts["HeartbeatRetries[reason=refused]"] == 1
