"""An engine's completion refused to its last try withdraws its claim (the call did not land) and counts the refusal.
The sweep's keep-alive writes at the seq it read, its heartbeat renewed: a sweep that read the record claimed, and
whose heartbeat was on its way while the engine withdrew at the same seq, wrote the claim back and the refusal off.
The message's redeliveries then no longer ran the refused completion (a refusal short of the last: watched, not failed
to the dead-letter queue), and the next completer took the claim over as one whose call may have landed, its "no
active lifecycle action" (an operator's completion) recorded as a completion of ours."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from nodecycle.domain.engine import COMPLETION_CLAIM, MAX_REFUSED_ATTEMPTS
from nodecycle.domain.errors import AccessRefused
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import WorkMessage
from tests.support.fakes import T0, FakeAutoscaling
from tests.unit.foundation.test_engine import PLAN, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import Repair

WAIT = 10.0  # seconds a thread waits for the other at most (a step of the interleaving, not a timing)


class RefusedWhileTheSweepHeartbeats(FakeAutoscaling):
    """Auto Scaling refusing the engine's completion to its role, its answer given while the sweep's heartbeat is on
    its way (the engine's withdrawal lands before the sweep's commit)."""

    def __init__(self) -> None:
        super().__init__()
        self.completing = threading.Event()
        self.answer = threading.Event()
        self.engine: threading.Thread | None = None

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        self.completing.set()
        assert self.answer.wait(WAIT)
        raise AccessRefused("completing a lifecycle action", "AccessDenied", "explicit deny")

    def heartbeat(self, action: ActionRef) -> bool:
        if self.engine is not None:
            self.answer.set()
            self.engine.join(WAIT)
        return super().heartbeat(action)


def test_a_claim_the_engine_withdrew_while_the_sweeps_heartbeat_was_on_its_way_stays_withdrawn() -> None:
    # Given a completion refused to the drain function's role 7 times, its action's heartbeat due before the next
    # sweep; its message runs, claims the record and calls Auto Scaling, which refuses it again
    autoscaling = RefusedWhileTheSweepHeartbeats()
    repair = Repair(autoscaling=autoscaling)
    autoscaling.action_timeout = 600
    repair.clock.current = T0 + timedelta(minutes=20)
    record = make_record(PLAN, Step.COMPLETE, seq=4, heartbeat_timeout=600, refusals=MAX_REFUSED_ATTEMPTS - 1)
    assert repair.records.create(kept_alive(autoscaling, record, repair.clock.now() - timedelta(seconds=500)))
    engine = repair.engine()
    failed: list[BaseException] = []

    def run_the_message() -> None:
        try:
            engine.handle(WorkMessage(record_id=record.id, seq=record.seq, step=record.step))
        except AccessRefused as error:
            failed.append(error)

    autoscaling.engine = threading.Thread(target=run_the_message)
    autoscaling.engine.start()
    assert autoscaling.completing.wait(WAIT)

    # When the sweep reads it, claimed, and keeps it alive while the engine's refusal comes back
    repair.run()

    # Then the message failed (to be delivered again, then dead-lettered), and the record says so: no claim, the
    # last refusal counted (before: the sweep's write put the claim back and took the refusal off)
    assert not autoscaling.engine.is_alive()
    assert [type(error) for error in failed] == [AccessRefused]
    after = repair.records.get(record.id)
    assert after is not None
    assert COMPLETION_CLAIM not in after.extra
    assert after.refusals == MAX_REFUSED_ATTEMPTS
    with pytest.raises(AccessRefused):  # (its redelivery runs the refused completion again, and fails)
        engine.handle(WorkMessage(record_id=record.id, seq=record.seq, step=record.step))
