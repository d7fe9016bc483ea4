"""The last sweep that can settle an action before its global timeout takes over a completion claim a margin after it
was made, whatever its completer's invocation has left (``LifecycleRepair._settle``): a second call is the lesser harm
there. The engine whose claim it took over may still be calling (Auto Scaling throttled: botocore's attempts, their
backoffs and read timeouts, past the margin), and the sweep's call lands first. The action is completed once, by the
sweep, and recorded so; the engine's call, told "no active lifecycle action", must not count the action settled
elsewhere (``LifecycleActionsSettledElsewhere``, the dashboard's): its claim was taken over, its commit loses, and no
one else settled it."""

from __future__ import annotations

from dataclasses import dataclass, field

from nodecycle.domain.completion import SETTLED_ELSEWHERE
from nodecycle.domain.engine import Handled
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.domain.sweep.sweeper import Counts
from tests.support.fakes import FakeAutoscaling
from tests.unit.foundation.test_engine import MARGIN
from tests.unit.sweeper.test_sweeper import Repair, stalled_at_its_last_chance


@dataclass
class SweptWhileCalling(FakeAutoscaling):
    """Auto Scaling whose answer to the first completion comes more than a margin later (throttled, retried), a sweep
    running meanwhile; the call itself lands after the sweep's."""

    sweep: list[object] = field(default_factory=list)  # the sweep to run (one callable), once
    reports: list[Counts] = field(default_factory=list)

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        if self.sweep:
            run = self.sweep.pop()
            assert callable(run)
            self.clock.advance(MARGIN + 1)
            self.reports.append(run())
        return super().complete(action, result)


def test_an_engine_completion_the_last_sweep_took_over_and_completed_first_counts_nothing_settled_elsewhere() -> (
    None
):
    # Given a drain at its completion, at the last sweep before its action's global timeout, whose engine run claims it
    # and calls Auto Scaling, and a sweep that runs while that call is on its way (throttled past the margin)
    autoscaling = SweptWhileCalling()
    repair = Repair(autoscaling=autoscaling)
    record_id = stalled_at_its_last_chance(repair, step=Step.COMPLETE)
    repair.clock.advance(30)  # (no sweep after the next can still settle it)
    autoscaling.sweep.append(repair.run)
    record = repair.records.get(record_id)
    assert record is not None

    # When the engine runs the completion, and the sweep takes its claim over and completes the action first
    handled = repair.engine().handle(WorkMessage(record_id=record.id, seq=record.seq, step=record.step))

    # Then the action was completed once, by the sweep, and recorded so; the engine's call, told there was no active
    # action, lost its commit and counted nothing settled elsewhere
    assert autoscaling.reports[0]["LifecyclesSettled"] == 1
    assert handled is Handled.CONFLICT
    assert [result for _, result in autoscaling.completed] == [ActionResult.CONTINUE]
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.completed_at is not None
    assert not settled.extra.get(SETTLED_ELSEWHERE)
    assert repair.metrics.counts["LifecycleActionsCompleted"] == 1
    assert repair.metrics.counts["LifecycleActionsSettledElsewhere"] == 0, (
        "the engine's completion outrun by the sweep counted the action settled elsewhere"
    )
