"""The engine's heartbeat told "no active lifecycle action" because the sweeper's settlement at the action's
last chance completed it between the engine's read of the record and its heartbeat: no expiry (its alarm: a
node may have gone undrained); the engine's run loses to the settlement's commits and leaves the lifecycle to
it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from nodecycle.domain.completion import SETTLED_ELSEWHERE
from nodecycle.domain.engine import Handled, Outcome
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeAutoscaling
from tests.unit.foundation.test_engine import PLAN, Script, World, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair


class SettledBeforeTheHeartbeat(FakeAutoscaling):
    """Auto Scaling, and a sweep that runs before the first heartbeat asked is answered."""

    def __init__(self) -> None:
        super().__init__()
        self.before_heartbeat: list[Callable[[], object]] = []

    def heartbeat(self, action: ActionRef) -> bool:
        if self.before_heartbeat:
            self.before_heartbeat.pop()()
        return super().heartbeat(action)


def test_an_engines_heartbeat_after_the_sweepers_settlement_counts_no_expiry() -> None:
    # Given a drain polling its eviction at its action's last chance by the sweeper's reckoning (not yet by the
    # engine's guard), its heartbeat due after this poll
    world = World()
    world.autoscaling = autoscaling = SettledBeforeTheHeartbeat()
    autoscaling.clock = world.clock
    autoscaling.action_timeout = 600
    record = make_record(PLAN, Step.EVICT, node="n1", seq=4, heartbeat_timeout=600)
    world.clock.current = record.global_deadline - INTERVAL - MARGIN
    record = record.model_copy(update={"due_at": world.clock.now()})
    world.records.create(kept_alive(autoscaling, record, world.clock.now() - timedelta(seconds=570)))
    repair = Repair(
        clock=world.clock,
        records=world.records,
        queues=world.queues,
        autoscaling=autoscaling,
        metrics=world.metrics,
    )
    reports: list[dict[str, int]] = []
    autoscaling.before_heartbeat.append(lambda: reports.append(repair.run()))
    engine = world.engine({Step.EVICT: Script([Outcome.wait(5)])})

    # When the sweep settles the action between the engine's read of the record and its heartbeat
    handled = engine.handle(world.message())

    # Then the sweeper completed it with its failure result and says so; the engine's run lost, and nothing
    # counts the action expired
    assert reports[0]["LifecyclesSettled"] == 1
    assert handled is Handled.CONFLICT
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 0
    settled = world.records.get(record.id)
    assert settled is not None
    assert (settled.outcome, settled.result) == ("settled-by-sweeper", ActionResult.CONTINUE)
    assert settled.completed_at is not None
    assert SETTLED_ELSEWHERE not in settled.extra
    assert len(autoscaling.completed) == 1
