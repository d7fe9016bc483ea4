"""GlobalTimeoutsNear pages once per action. A sweeper's settlement whose claim was withdrawn (its completion
refused to the sweeper's role, AccessDenied) or recorded by the engine's retry of the completion (throttled again:
the retry's commit takes the claim off) leaves the record at its completion with no claim on it; the next sweep,
still at the action's last chance, settles it again and must not count it a second time."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.sweeper.test_sweeper import INTERVAL, Repair, stalled_at_its_last_chance

AT: dict[str, dict[str, Any]] = {
    # (a stalled drain: the sweep settles it with the failure result, outcome settled-by-sweeper)
    "evicting": {"step": Step.EVICT},
    # (a completion stalled in its queue: the sweep keeps its result and outcome)
    "at its completion": {"step": Step.COMPLETE, "result": ActionResult.CONTINUE, "outcome": "completed"},
}


def refused(action: ActionRef, result: ActionResult) -> bool:
    raise AccessRefused("completing a lifecycle action", "AccessDenied", "explicit deny")


def throttled(action: ActionRef, result: ActionResult) -> bool:
    raise TransientError("Rate exceeded (Throttling)")


def withdrawn(repair: Repair) -> None:
    """Nothing more: the sweep withdrew its claim (its call did not land)."""


def retried_by_the_engine(repair: Repair) -> None:
    """The engine runs the completion the sweep sent on, throttled again: its retry's commit takes the claim off."""
    (sent,) = repair.queues.take()
    with contextlib.suppress(TransientError):
        repair.engine().handle(sent.message)
    repair.queues.take()  # (its retry, which the stalled queue does not run)
    retried = repair.records.get(sent.message.record_id)
    assert retried is not None
    assert (retried.step, retried.attempts) == (Step.COMPLETE, 1)


@pytest.mark.parametrize("where", list(AT))
@pytest.mark.parametrize(
    ("fault", "then"),
    [
        pytest.param(refused, withdrawn, id="refused to the sweeper"),
        pytest.param(throttled, retried_by_the_engine, id="throttled, retried by the engine"),
    ],
)
def test_a_settlement_that_did_not_land_and_is_settled_again_is_counted_once(
    where: str,
    fault: Callable[[ActionRef, ActionResult], bool],
    then: Callable[[Repair], None],
) -> None:
    # Given a lifecycle at its last chance whose settlement Auto Scaling does not take, and no claim left on it
    repair = Repair()
    record_id = stalled_at_its_last_chance(repair, **AT[where])
    complete = repair.autoscaling.complete
    repair.autoscaling.complete = fault  # type: ignore[method-assign,assignment]
    with pytest.raises(SweepFailed):
        repair.run()
    then(repair)
    left = repair.records.get(record_id)
    assert left is not None
    assert "completion_claim" not in left.extra
    assert repair.metrics.counts["GlobalTimeoutsNear"] == 1

    # When Auto Scaling takes the completion again, and the next sweep (the queue stalled) settles it
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
