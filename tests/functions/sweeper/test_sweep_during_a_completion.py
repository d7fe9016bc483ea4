"""A sweep that runs while the step engine completes a lifecycle action: after CompleteLifecycleAction landed,
before the engine's commit says so (the record still at its completion, its action open), on the real record
store (DynamoDB on moto). No lag is needed: the record is read as it is. The action was completed fine, by the
engine: the sweep must neither count it expired (its alarm: a node may have gone undrained) nor make the record
say someone else settled it. Where the sweep heartbeats the action, it finds it gone at its completion and
leaves it to the completion; within the last two margins, where it completes instead, it takes the completion
over (the second test, expected to fail until the engine claims its completion before it calls Auto Scaling)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import pytest

from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.domain.completion import SETTLED_ELSEWHERE, CompleteAction
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.engine import Handled, Outcome
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.sweep.lifecycles import LifecycleRepair
from nodecycle.domain.sweep.sweeper import Counts
from tests.support.fakes import FakeAutoscaling
from tests.support.stack import Stack
from tests.unit.foundation.test_engine import MARGIN, Script, World, kept_alive, make_record
from tests.unit.sweeper.test_orphans import AMPLE, INTERVAL
from tests.unit.sweeper.test_sweeper import GRACE

SWEEP_SETTLE_BEFORE = INTERVAL + 2 * timedelta(seconds=MARGIN)
# (a drain of an instance with no address: its completion runs inline after its eviction)
PLAN = (Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.COMPLETE, Step.CLEANUP, Step.DONE)


@dataclass
class SweptAfterCompletion(FakeAutoscaling):
    """Auto Scaling, and a sweep that runs right after the first completion it accepts: before the completer
    commits."""

    sweep: list[object] = field(default_factory=list)  # the sweep to run (one callable), once
    reports: list[Counts] = field(default_factory=list)

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        completed = super().complete(action, result)
        if completed and self.sweep:
            run = self.sweep.pop()
            assert callable(run)
            self.reports.append(run())
        return completed


def world_on(stack: Stack) -> World:
    world = World(
        records=DynamoRecordStore(stack.table, ttl=timedelta(days=1)),  # type: ignore[arg-type]
        autoscaling=SweptAfterCompletion(),
    )
    world.autoscaling.clock = world.clock
    return world


def arm_sweep(world: World) -> SweptAfterCompletion:
    autoscaling = world.autoscaling
    assert isinstance(autoscaling, SweptAfterCompletion)
    repair = repair_of(world)

    def sweep() -> Counts:
        return repair(list(world.records.open_records("stack-a")), world.clock.now(), AMPLE)

    autoscaling.sweep.append(sweep)
    return autoscaling


def repair_of(world: World) -> LifecycleRepair:
    autoscaling = world.autoscaling
    return LifecycleRepair(
        records=world.records,
        dispatcher=Dispatcher(
            records=world.records, queues=world.queues, clock=world.clock, metrics=world.metrics
        ),
        autoscaling=autoscaling,
        completion=CompleteAction(autoscaling, world.metrics, world.records),
        metrics=world.metrics,
        resume_grace=GRACE,
        margin=timedelta(seconds=MARGIN),
        interval=INTERVAL,
        settle_before=SWEEP_SETTLE_BEFORE,
        lateness=timedelta(seconds=60),  # (the schedule's minute, as settings reckon it)
        failure_result=lambda record: ActionResult.CONTINUE,
        clock=world.clock,
    )


RECORD = make_record(PLAN, Step.EVICT, node="n1", seq=4)


def drained_at(world: World, at: datetime) -> None:
    """A drain whose eviction finishes at ``at`` (its next step the completion, run inline), kept alive."""
    world.clock.current = at
    assert world.records.create(kept_alive(world.autoscaling, RECORD, at - timedelta(seconds=200)))


def run_drain(world: World) -> Handled:
    engine = world.engine(
        {
            Step.EVICT: Script([Outcome.next()] * 2),
            Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics, world.records),
            Step.CLEANUP: Script([Outcome.wait(5)] * 2),
        }
    )
    return engine.handle(world.message())


def assert_completed_by_the_engine(world: World) -> None:
    record = world.records.get(RECORD.id)
    assert record is not None
    assert record.completed_at is not None
    assert record.result is ActionResult.CONTINUE
    assert SETTLED_ELSEWHERE not in record.extra
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 0
    assert world.metrics.counts.get("LifecycleActionsSettledElsewhere", 0) == 0
    assert world.metrics.counts["LifecycleActionsCompleted"] == 1
    assert len(world.autoscaling.completed) == 1


@pytest.mark.usefixtures("stack")
def test_a_sweep_heartbeating_an_action_the_engine_has_just_completed_counts_no_expiry(stack: Stack) -> None:
    # Given a drain whose eviction ends when its heartbeat is due by the record (the sweep would heartbeat it)
    world = world_on(stack)
    drained_at(world, RECORD.heartbeat_deadline - timedelta(seconds=MARGIN))
    autoscaling = arm_sweep(world)

    # When the engine runs its completion, and the sweep runs after CompleteLifecycleAction landed and before
    # the engine's commit
    run_drain(world)

    # Then the sweep found the action gone at its completion and left it to the completion: no expiry counted;
    # the record is the engine's, completed with its result
    (report,) = autoscaling.reports
    assert (report["LifecyclesExpired"], report["LifecyclesSettled"]) == (0, 0)
    assert_completed_by_the_engine(world)


@pytest.mark.usefixtures("stack")
def test_a_sweep_at_the_last_chance_of_an_action_the_engine_has_just_completed_does_not_take_it_over(
    stack: Stack,
) -> None:
    # Given a drain whose eviction ends within two margins of its global timeout, where the sweep no longer
    # heartbeats an action but completes it (the engine completes it at once, with its result)
    world = world_on(stack)
    drained_at(world, RECORD.global_deadline - timedelta(seconds=2 * MARGIN - 20))
    autoscaling = arm_sweep(world)

    # When the sweep runs after CompleteLifecycleAction landed and before the engine's commit
    run_drain(world)

    # Then the record says a completion of nodecycle's settled it, with its result, and nothing counts it
    # settled elsewhere or expired
    (report,) = autoscaling.reports
    assert report["LifecyclesExpired"] == 0
    assert_completed_by_the_engine(world)


@dataclass
class ClaimSeen(FakeAutoscaling):
    """Auto Scaling that reads, at each completion, the claim its completer wrote on the record before calling."""

    records: DynamoRecordStore | None = None
    seen: list[object] = field(default_factory=list)

    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        assert self.records is not None
        record = self.records.get(RECORD.id)
        assert record is not None
        self.seen.append(record.extra.get("completion_claim", {}).get("by"))
        return super().complete(action, result)


@pytest.mark.parametrize("completer", ["engine", "sweeper"])
def test_a_claim_names_its_completer_the_engine_or_the_sweepers_settlement(
    stack: Stack, completer: str
) -> None:
    # Given a drain stalled at its eviction within two margins of its global timeout, on Auto Scaling that reads
    # the record at the completion
    autoscaling = ClaimSeen()
    world = World(records=DynamoRecordStore(stack.table, ttl=timedelta(days=1)), autoscaling=autoscaling)  # type: ignore[arg-type]
    autoscaling.clock = world.clock
    autoscaling.records = world.records  # type: ignore[assignment]
    drained_at(world, RECORD.global_deadline - timedelta(seconds=2 * MARGIN - 20))

    # When its eviction ends and the engine completes it, or the sweep settles it first
    if completer == "engine":
        run_drain(world)
    else:
        report = repair_of(world)(list(world.records.open_records("stack-a")), world.clock.now(), AMPLE)
        assert report["LifecyclesSettled"] == 1

    # Then the claim that was on the record during the call named its completer (for `nodecycle status`)
    assert autoscaling.seen == [completer]
