"""The completion's counts (LifecycleActionsCompleted, LifecycleActionsSettledElsewhere, GlobalTimeoutsNear: each pages
or graphs once per action) when a sweep that completed an action at its last chance crashed before its commit (its
DynamoDB write throttled past the client's retries) and the next sweep (EventBridge Scheduler's retry, or the next on
schedule) takes its claim over."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.completion import SETTLED_ELSEWHERE
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import WARM_POOL, LifecycleRecord, Step, Transition
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.sweeper.test_sweeper import MARGIN, Repair, stalled_at_its_last_chance

INSTANCE = "i-0123456789abcdef0"


@pytest.mark.parametrize("case", ["drain", "launch-out-of-the-pool"])
def test_a_settlement_taken_over_after_its_commit_failed_is_counted_once(case: str) -> None:
    # Given a lifecycle stalled at the last sweep before its global timeout, which that sweep completes, its commit of
    # what the call did failing (DynamoDB throttled past the client's retries): the sweep fails, its claim left
    repair = Repair()
    changes: dict[str, object] = {}
    if case == "launch-out-of-the-pool":
        changes = {
            "transition": Transition.LAUNCHING,
            "hook": "launch",
            "origin": WARM_POOL,
            "destination": "AutoScalingGroup",
            "step": Step.READY_GATE,
        }
    repair.autoscaling.issue("token", INSTANCE, hook=("nodes", str(changes.get("hook", "terminate"))))
    record_id = stalled_at_its_last_chance(repair, **changes)
    repair.clock.advance(
        30
    )  # (the last sweep: the next one would come less than a margin before the timeout)
    commit = repair.records.commit
    failures = [TransientError("ProvisionedThroughputExceededException")]

    def throttled_after_the_call(record: LifecycleRecord, expected_seq: int) -> bool:
        if not record.action_open and failures:
            raise failures.pop()
        return commit(record, expected_seq=expected_seq)

    repair.records.commit = throttled_after_the_call  # type: ignore[method-assign]
    with pytest.raises(SweepFailed):
        repair.run()
    assert len(repair.autoscaling.completed) == 1

    # When the sweep runs again (Scheduler's retry), past the margin its claim holds at the last sweep
    repair.clock.advance(MARGIN.total_seconds() + 1)
    repair.run()

    # Then the action is recorded as completed by the sweep that vanished, and each count is made once
    settled = repair.records.items[record_id]
    assert not settled.action_open
    assert not settled.extra.get(SETTLED_ELSEWHERE)
    counts = repair.metrics.counts
    assert (
        counts.get("LifecycleActionsCompleted", 0),
        counts.get("GlobalTimeoutsNear", 0),
        counts.get("LifecycleActionsSettledElsewhere", 0),
    ) == (1, 1, 0)
    assert len(repair.autoscaling.completed) == 1
    assert timedelta(0) < settled.global_deadline - repair.clock.now()
