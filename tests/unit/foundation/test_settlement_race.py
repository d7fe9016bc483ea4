"""The sweeper's settlement of an action near its global timeout, racing the engine's own completion of it.
Auto Scaling takes the first completion of an action and refuses the others: one action, one result, whichever
of the two writers gets there first. A settlement that completes before it claims the lifecycle (its
conditional write) can send its failure result while the engine, which moved the lifecycle on meanwhile,
completes it with another."""

from __future__ import annotations

import pytest

from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.foundation.test_engine import Script, kept_alive, make_record
from tests.unit.foundation.test_engine import World as EngineWorld
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair


def test_a_launch_the_sweeper_settles_while_the_engine_completes_it_gets_one_result() -> None:
    # Given a launch at its readiness gate, shortly before its action's global timeout: past the point where the
    # sweeper settles an open action (with the failure result, ABANDON here), not yet where the engine's guard
    # does
    repair = Repair(failure=ActionResult.ABANDON)
    launch = (Step.READY_GATE, Step.COMPLETE, Step.DONE)
    record = make_record(launch, Step.READY_GATE)
    repair.clock.current = record.global_deadline - INTERVAL - MARGIN
    # (its last heartbeat less than a heartbeat timeout ago: Auto Scaling ends an action at its deadline)
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - INTERVAL + MARGIN))
    engine = EngineWorld(
        clock=repair.clock, records=repair.records, queues=repair.queues, autoscaling=repair.autoscaling
    ).engine(
        {
            Step.READY_GATE: Script([Outcome.next(outcome="node-ready")]),  # the node is Ready
            Step.COMPLETE: CompleteAction(repair.autoscaling, repair.metrics),
        }
    )
    gate_message = WorkMessage(record_id=record.id, seq=record.seq, step=Step.READY_GATE)
    # and Auto Scaling, which records every completion asked of it, the refused ones too
    asked: list[ActionResult] = []
    accept = repair.autoscaling.complete
    engine_ran = False

    def complete(action: ActionRef, result: ActionResult) -> bool:
        nonlocal engine_ran
        if not engine_ran:
            # the gate's own message runs meanwhile: its node found Ready, the engine completes the launch
            engine_ran = True
            engine.handle(gate_message)
        asked.append(result)
        return accept(action, result)

    repair.autoscaling.complete = complete  # type: ignore[method-assign]

    # When the sweeper settles the launch while the engine runs its gate
    repair.run()

    # Then Auto Scaling is asked for one result only
    assert len(set(asked)) == 1, asked


def test_a_settlement_whose_completion_is_throttled_leaves_the_completion_to_the_engine_with_its_result() -> (
    None
):
    # Given a launch at its readiness gate past the point where the sweeper settles it, and Auto Scaling
    # throttling the completion
    repair = Repair(failure=ActionResult.ABANDON)
    record = make_record((Step.READY_GATE, Step.COMPLETE, Step.DONE), Step.READY_GATE)
    repair.clock.current = record.global_deadline - INTERVAL - MARGIN
    repair.records.create(kept_alive(repair.autoscaling, record, repair.clock.now() - INTERVAL + MARGIN))

    def throttled(action: ActionRef, result: ActionResult) -> bool:
        raise TransientError("Throttling: Rate exceeded")

    repair.autoscaling.complete = throttled  # type: ignore[method-assign]

    # When the sweeper settles it (the part fails, reporting it)
    with pytest.raises(SweepFailed):
        repair.run()

    # Then the lifecycle is at its completion with the failure result, and its message is on its way to the
    # engine, which retries the completion
    settling = repair.records.get(record.id)
    assert settling is not None
    assert (settling.step, settling.result, settling.seq) == (
        Step.COMPLETE,
        ActionResult.ABANDON,
        record.seq + 1,
    )
    assert [(s.message.step, s.message.seq) for s in repair.queues.take()] == [
        (Step.COMPLETE, record.seq + 1)
    ]
