"""The sweeper's settlement at an action's last chance against what can happen between its calls: the sweep
killed (its Lambda timeout) between its claim and its completion, and Auto Scaling refusing the sweeper's
completion alone (its role's policy edited) while the drain function's is allowed."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import AccessRefused
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.support.fakes import FakeMetrics
from tests.unit.foundation.test_engine import PLAN, Script, kept_alive, make_record
from tests.unit.foundation.test_engine import World as EngineWorld
from tests.unit.sweeper.test_sweeper import (
    INTERVAL,
    MARGIN,
    Repair,
    killed_at_its_completion,
    stalled_at_its_last_chance,
)


def test_a_sweep_killed_between_its_claim_and_its_completion_is_finished_by_the_next_sweep() -> None:
    # Given a stalled drain at its last chance, and a sweep that the runtime ends at its completion call (after
    # it claimed the lifecycle for its settlement, before Auto Scaling took the completion)
    repair = Repair()
    record_id = stalled_at_its_last_chance(repair)
    with killed_at_its_completion(repair.autoscaling):
        repair.run()
    claimed = repair.records.get(record_id)
    assert claimed is not None
    assert (claimed.step, claimed.outcome, claimed.completed_at) == (
        Step.COMPLETE,
        "settled-by-sweeper",
        None,
    )
    assert repair.queues.take() == []  # (killed: nothing sent on)

    # When the next sweep runs, on time (its action still alive: two margins before its global timeout)
    repair.clock.advance(INTERVAL.total_seconds())
    counts = repair.run()

    # Then it finishes the job: the action completed once, with the sweeper's failure result, counted as the
    # sweeper's settlement, and what follows the completion sent on
    assert counts["LifecyclesSettled"] == 1
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    settled = repair.records.get(record_id)
    assert settled is not None
    assert (settled.outcome, settled.result) == ("settled-by-sweeper", ActionResult.CONTINUE)
    assert settled.completed_at is not None
    assert SETTLED_ELSEWHERE not in settled.extra
    assert [sent.message.step for sent in repair.queues.take()] == [settled.step]


def test_a_settlement_whose_completion_the_sweepers_role_is_refused_is_completed_by_the_drain_function() -> (
    None
):
    # Given a stalled drain at its last chance, and Auto Scaling refusing the sweeper's CompleteLifecycleAction
    # (its role's policy edited by hand) though the drain function's role may complete
    repair = Repair()
    record_id = stalled_at_its_last_chance(repair)
    complete = repair.autoscaling.complete

    def refused(action: ActionRef, result: ActionResult) -> bool:
        raise AccessRefused("completing a lifecycle action", "AccessDenied", "explicit deny")

    repair.autoscaling.complete = refused  # type: ignore[method-assign]

    # When the sweep settles it, Then the sweep fails (its alarm) having completed nothing itself
    with pytest.raises(SweepFailed):
        repair.run()
    assert repair.autoscaling.completed == []

    # and the completion it claimed is sent on to the drain function, which completes the action with the
    # sweeper's failure result before the global timeout
    repair.autoscaling.complete = complete  # type: ignore[method-assign]
    metrics = FakeMetrics()
    engine = EngineWorld(
        clock=repair.clock, records=repair.records, queues=repair.queues, autoscaling=repair.autoscaling
    ).engine(
        {
            Step.COMPLETE: CompleteAction(repair.autoscaling, metrics, repair.records),
            Step.RELEASE_EIP: Script([]),
            Step.CLEANUP: Script([]),
        }
    )
    (sent,) = repair.queues.take()
    assert sent.message.step is Step.COMPLETE
    engine.handle(sent.message)
    assert [result for _, result in repair.autoscaling.completed] == [ActionResult.CONTINUE]
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.outcome == "settled-by-sweeper"
    assert settled.completed_at is not None
    assert metrics.counts["LifecycleActionsCompleted[result=CONTINUE]"] == 1


def test_a_last_chance_settlement_between_the_engines_completion_and_its_commit_completes_once_and_goes_on_once() -> (
    None
):
    # Given a drain at its completion at the last sweep before its action's global timeout, its message on time
    # (the drain function is completing it), with its result decided
    repair = Repair()
    repair.autoscaling.action_timeout = 600
    record = make_record(
        PLAN, Step.COMPLETE, node="n1", seq=7, heartbeat_timeout=600, result=ActionResult.ABANDON
    )
    repair.clock.current = record.global_deadline - INTERVAL - MARGIN
    record = record.model_copy(update={"due_at": repair.clock.now(), "updated_at": repair.clock.now()})
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - timedelta(seconds=10)))
    complete = repair.autoscaling.complete
    reports: list[dict[str, int]] = []
    swept: list[bool] = []

    def sweep_between_the_completion_and_its_commit(action: ActionRef, result: ActionResult) -> bool:
        done = complete(action, result)
        if not swept:  # (the drain function's call; the sweep's own goes straight through)
            swept.append(True)
            reports.append(repair.run())  # the scheduled sweep, between Auto Scaling's answer and the commit
        return done

    repair.autoscaling.complete = sweep_between_the_completion_and_its_commit  # type: ignore[method-assign]
    engine = EngineWorld(
        clock=repair.clock, records=repair.records, queues=repair.queues, autoscaling=repair.autoscaling
    ).engine(
        {
            Step.COMPLETE: CompleteAction(repair.autoscaling, repair.metrics, repair.records),
            Step.CLEANUP: Script([Outcome.wait(5)]),
        }
    )

    # When the drain function completes the action and the sweep settles the same action before its commit
    engine.handle(WorkMessage(record_id=record.id, seq=7, step=Step.COMPLETE))

    # Then Auto Scaling took one completion, with the lifecycle's own result (the sweep found the drain
    # function's claim of the completion and asked nothing); the lifecycle went on past its completion once,
    # with that result, its cleanup sent once (the drain function's)
    assert repair.autoscaling.completed == [(record.action, ActionResult.ABANDON)]
    moved = repair.records.get(record.id)
    assert moved is not None
    assert (moved.step, moved.result) == (Step.CLEANUP, ActionResult.ABANDON)
    assert moved.completed_at is not None
    assert [sent.message.step for sent in repair.queues.take()] == [Step.CLEANUP]
    assert (reports[0]["LifecyclesSettled"], reports[0]["RepairsRaced"]) == (0, 1)
