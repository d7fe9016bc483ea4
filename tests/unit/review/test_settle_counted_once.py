"""GlobalTimeoutsNear pages once per action. A sweeper's settlement whose claim was withdrawn (its completion
refused to the sweeper's role, AccessDenied) or recorded by the engine's retry of the completion (throttled again:
the retry's commit takes the claim off) leaves the record at its completion with no claim on it; the next sweep,
still at the action's last chance, settles it again and must not count it a second time."""

from __future__ import annotations

import contextlib
from datetime import timedelta

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.foundation.test_engine import PLAN, Script, World, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair

AT = {
    # (a stalled drain: the sweep settles it with the failure result, outcome settled-by-sweeper)
    "evicting": {"step": Step.EVICT},
    # (a completion stalled in its queue: the sweep keeps its result and outcome)
    "at its completion": {"step": Step.COMPLETE, "result": ActionResult.CONTINUE, "outcome": "completed"},
}


def at_its_last_chance(repair: Repair, step: Step, **changes: object) -> str:
    """A stalled lifecycle at the last sweep before its action's global timeout, kept alive so far; its id."""
    repair.autoscaling.action_timeout = 600
    record = make_record(PLAN, step, node="n1", seq=4, heartbeat_timeout=600, **changes)
    repair.clock.current = record.global_deadline - INTERVAL - MARGIN
    assert repair.records.create(
        kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=100))
    )
    return record.id


def refused(action: ActionRef, result: ActionResult) -> bool:
    raise AccessRefused("completing a lifecycle action", "AccessDenied", "explicit deny")


def throttled(action: ActionRef, result: ActionResult) -> bool:
    raise TransientError("Rate exceeded (Throttling)")


@pytest.mark.parametrize("where", list(AT))
def test_a_settlement_refused_to_the_sweeper_and_settled_again_is_counted_once(where: str) -> None:
    # Given a lifecycle at its last chance whose settlement Auto Scaling refuses to the sweeper's role (its claim
    # withdrawn: the call did not land)
    repair = Repair()
    record_id = at_its_last_chance(repair, **AT[where])  # type: ignore[arg-type]
    complete = repair.autoscaling.complete
    repair.autoscaling.complete = refused  # type: ignore[method-assign]
    with pytest.raises(SweepFailed):
        repair.run()
    assert repair.metrics.counts["GlobalTimeoutsNear"] == 1

    # When the role is allowed again (a policy rolled back), and the next sweep settles it
    repair.autoscaling.complete = complete  # type: ignore[method-assign]
    repair.clock.advance(INTERVAL.total_seconds())
    counts = repair.run()

    # Then the action is completed once, and counted near its global timeout once (the metric pages)
    assert counts["LifecyclesSettled"] == 1
    assert len(repair.autoscaling.completed) == 1
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.completed_at is not None
    assert repair.metrics.counts["GlobalTimeoutsNear"] == 1


@pytest.mark.parametrize("where", list(AT))
def test_a_settlement_throttled_whose_claim_the_engines_retry_recorded_is_counted_once(where: str) -> None:
    # Given a lifecycle at its last chance whose settlement Auto Scaling throttles (the sweep sends the completion
    # on to the engine), and whose completion the engine runs and is throttled again (its retry's commit takes the
    # claim off the record)
    repair = Repair()
    record_id = at_its_last_chance(repair, **AT[where])  # type: ignore[arg-type]
    complete = repair.autoscaling.complete
    repair.autoscaling.complete = throttled  # type: ignore[method-assign]
    with pytest.raises(SweepFailed):
        repair.run()
    engine = World(
        clock=repair.clock,
        records=repair.records,
        queues=repair.queues,
        autoscaling=repair.autoscaling,
        metrics=repair.metrics,
    ).engine(
        {
            Step.COMPLETE: CompleteAction(repair.autoscaling, repair.metrics, repair.records),
            Step.CLEANUP: Script([Outcome.wait(5)]),
        }
    )
    (sent,) = repair.queues.take()
    with contextlib.suppress(TransientError):
        engine.handle(sent.message)
    retried = repair.records.get(record_id)
    assert retried is not None
    assert (retried.step, retried.attempts) == (Step.COMPLETE, 1)
    assert "completion_claim" not in retried.extra
    assert repair.metrics.counts["GlobalTimeoutsNear"] == 1

    # When Auto Scaling answers again, and the next sweep (its queue stalled: the engine's retry not run) settles it
    repair.queues.take()
    repair.autoscaling.complete = complete  # type: ignore[method-assign]
    repair.clock.advance(INTERVAL.total_seconds())
    counts = repair.run()

    # Then the action is completed once, and counted near its global timeout once
    assert counts["LifecyclesSettled"] == 1
    assert len(repair.autoscaling.completed) == 1
    assert repair.metrics.counts["GlobalTimeoutsNear"] == 1
