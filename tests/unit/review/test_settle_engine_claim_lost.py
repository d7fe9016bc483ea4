"""The engine's completion claim lost to the sweeper's settlement: a completion whose confirmation before its claim
(an action no step confirmed) is slow enough for the sweep at the action's last chance to settle it in between. The
engine's claim, conditional on the seq it read, loses: it calls nothing, and the action is completed once, by the
sweep, with no "settled elsewhere" for either."""

from __future__ import annotations

from collections.abc import Callable

from nodecycle.domain.completion import SETTLED_ELSEWHERE
from nodecycle.domain.engine import Handled
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import FakeAutoscaling
from tests.unit.sweeper.test_sweeper import Repair, stalled_at_its_last_chance


class SweptWhileConfirming(FakeAutoscaling):
    """Auto Scaling, and what runs once while the first confirmation it is asked is on its way."""

    def __init__(self) -> None:
        super().__init__()
        self.meanwhile: list[Callable[[], object]] = []

    def confirm(self, action: ActionRef) -> bool:
        if self.meanwhile:
            self.meanwhile.pop()()
        return super().confirm(action)


def test_an_engines_completion_whose_claim_a_settlement_beat_calls_nothing() -> None:
    # Given a completion at the sweeper's last chance, no step having confirmed its action (its queue stalled since
    # its event), whose message comes at last; and the sweep that settles it while the engine confirms it
    autoscaling = SweptWhileConfirming()
    repair = Repair(autoscaling=autoscaling)
    record_id = stalled_at_its_last_chance(
        repair, step=Step.COMPLETE, result=ActionResult.ABANDON, outcome="completed", verified_at=None
    )
    read = repair.records.get(record_id)
    assert read is not None
    sweeps: list[dict[str, int]] = []
    autoscaling.meanwhile.append(lambda: sweeps.append(repair.run()))

    # When the engine runs the completion
    handled = repair.engine().handle(WorkMessage(record_id=read.id, seq=read.seq, step=read.step))

    # Then the sweep settled it, and the engine, its claim lost, called nothing: one completion, with the action's own
    # result, recorded as the sweep's; nothing settled elsewhere
    assert handled is Handled.CONFLICT
    assert sweeps[0]["LifecyclesSettled"] == 1
    assert [result for _, result in autoscaling.completed] == [ActionResult.ABANDON]
    settled = repair.records.get(record_id)
    assert settled is not None
    assert settled.completed_at is not None
    assert (settled.result, settled.outcome) == (ActionResult.ABANDON, "completed")
    assert SETTLED_ELSEWHERE not in settled.extra
    assert repair.metrics.counts.get("LifecycleActionsSettledElsewhere[transition=terminate]", 0) == 0
