"""The engine's heartbeat told "no active lifecycle action" because the sweeper's settlement at the action's
last chance completed it between the engine's read of the record and its heartbeat: no expiry (its alarm: a
node may have gone undrained); the engine's run loses to the settlement's commits and leaves the lifecycle to
it. And the read after a heartbeat finds an action gone, as the engine and the sweep both make it: a record gone,
or a read that fails."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from nodecycle.domain.completion import SETTLED_ELSEWHERE
from nodecycle.domain.engine import Handled, Outcome
from nodecycle.domain.model import ActionRef, LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeAutoscaling, InMemoryRecords
from tests.unit.foundation.test_engine import PLAN, Script, World, kept_alive, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, MARGIN, Repair


class BeforeTheHeartbeat(FakeAutoscaling):
    """Auto Scaling, and what runs before the first heartbeat asked is answered (``before_heartbeat``: a sweep, a
    drain's completion); with ``ends``, every action ends (timed out) as that heartbeat comes, after it."""

    def __init__(self, *, ends: bool = False) -> None:
        super().__init__()
        self.before_heartbeat: list[Callable[[], object]] = []
        self._ends = ends

    def heartbeat(self, action: ActionRef) -> bool:
        if self.before_heartbeat:
            self.before_heartbeat.pop()()
            self.active = self.active and not self._ends
        return super().heartbeat(action)


def test_an_engines_heartbeat_after_the_sweepers_settlement_counts_no_expiry() -> None:
    # Given a drain polling its eviction at its action's last chance by the sweeper's reckoning (not yet by the
    # engine's guard), its heartbeat due after this poll
    world = World()
    world.autoscaling = autoscaling = BeforeTheHeartbeat()
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


# -- the record read again after a heartbeat found the action gone (engine.moved_on, the engine's and the sweep's)


class ReadAgainFails(InMemoryRecords):
    """The lifecycle table, whose reads fail past the first ``reads`` with a failure that is not AWS's (a bug)."""

    def __init__(self, reads: int) -> None:
        super().__init__()
        self.reads = reads

    def get(self, record_id: str) -> LifecycleRecord | None:
        self.reads -= 1
        if self.reads < 0:
            raise RuntimeError("a record that does not read back")
        return super().get(record_id)


def polling_at_its_heartbeat(world: World) -> tuple[BeforeTheHeartbeat, LifecycleRecord]:
    """A drain polling its eviction, its heartbeat due at this poll (its engine's or a sweep's), far from its
    global timeout."""
    world.autoscaling = autoscaling = BeforeTheHeartbeat(ends=True)
    autoscaling.clock = world.clock
    autoscaling.action_timeout = 600
    record = make_record(PLAN, Step.EVICT, node="n1", seq=4, heartbeat_timeout=600)
    world.clock.current = record.started_at + timedelta(minutes=30)
    record = record.model_copy(update={"due_at": world.clock.now()})
    record = kept_alive(autoscaling, record, world.clock.now() - timedelta(seconds=570))
    world.records.create(record)
    return autoscaling, record


def sweep_of(world: World) -> Repair:
    return Repair(
        clock=world.clock,
        records=world.records,
        queues=world.queues,
        autoscaling=world.autoscaling,
        metrics=world.metrics,
    )


def test_an_engines_heartbeat_that_finds_the_record_gone_counts_an_expiry() -> None:
    # Given a drain whose record is deleted (by hand: a record is deleted by its TTL only, days after it is over)
    # between its run's read and the heartbeat that finds the action gone
    world = World()
    autoscaling, record = polling_at_its_heartbeat(world)
    autoscaling.before_heartbeat.append(lambda: world.records.items.pop(record.id))

    # When the drain polls
    handled = world.engine({Step.EVICT: Script([Outcome.wait(5)])}).handle(world.message())

    # Then the action is counted expired (no completion of ours ever removes a record: nothing but the hook's
    # timeout explains the action gone), and nothing is written
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 1
    assert handled is Handled.CONFLICT
    assert world.records.items == {}


def test_a_sweeps_heartbeat_that_finds_the_record_gone_counts_an_expiry() -> None:
    # Given a drain whose record is deleted between the sweep's read and its heartbeat that finds the action gone
    world = World()
    autoscaling, record = polling_at_its_heartbeat(world)
    autoscaling.before_heartbeat.append(lambda: world.records.items.pop(record.id))

    # When a sweep runs
    report = sweep_of(world).run()

    # Then the action is counted expired, as the engine counts it (before: a record gone was taken for one moved
    # on, and the expiry went untold); nothing is written
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 1
    assert report["LifecyclesExpired"] == 0  # (its write lost: no record to record it in)
    assert world.records.items == {}


def test_an_engines_heartbeat_whose_record_does_not_read_again_judges_it_as_read() -> None:
    # Given a drain whose action ends before its heartbeat, and whose record's read after it fails with a
    # failure that is not AWS's
    world = World(records=ReadAgainFails(reads=2))  # (the message's, the run's)
    autoscaling, _ = polling_at_its_heartbeat(world)
    autoscaling.before_heartbeat.append(lambda: None)
    cleanup = Script([Outcome.wait(5)])

    # When the drain polls
    handled = world.engine({Step.EVICT: Script([Outcome.wait(5)]), Step.CLEANUP: cleanup}).handle(
        world.message()
    )

    # Then the record is judged as this run read it, as the sweep judges it: the action expired, its lifecycle
    # past its completion, its cleanup run (before: the failure failed the message, and each redelivery as well)
    assert handled is Handled.RAN
    assert len(cleanup.runs) == 1
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 1
    (expired,) = world.records.items.values()
    assert (expired.step, expired.outcome) == (Step.CLEANUP, "action-expired")


def test_a_sweeps_heartbeat_whose_record_does_not_read_again_judges_it_as_read() -> None:
    # Given a drain whose action ends before the sweep's heartbeat, and whose record's read after it fails
    world = World(records=ReadAgainFails(reads=1))
    autoscaling, _ = polling_at_its_heartbeat(world)
    autoscaling.before_heartbeat.append(lambda: None)

    # When a sweep runs
    report = sweep_of(world).run()

    # Then the record is judged as the sweep read it: the action expired, its lifecycle past its completion
    assert report["LifecyclesExpired"] == 1
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 1
    (expired,) = world.records.items.values()
    assert (expired.step, expired.outcome) == (Step.CLEANUP, "action-expired")
