"""A heartbeat recorded by an invocation whose clock runs minutes ahead of Auto Scaling's.

Auto Scaling renews an action from when it takes the heartbeat, on its own clock: the action's next deadline is a
heartbeat timeout after that. The record stored the renewal as the caller's clock read it (``renewed(now)``), so a
drain or eip invocation whose container clock ran ahead (the sandbox's clock-skew fault; a Lambda container whose
clock moved) wrote a heartbeat deadline that much later than Auto Scaling's. Every other run reads the record on
a clock that is right, and the engine plans its next heartbeat a margin and one fault's retry (210 s with the
template's defaults) before the recorded deadline: a lead past that, and the next heartbeat comes after the action
timed out, its node terminated mid-drain with the hook's default result (invariants 2 and 11). The sweeper, reading
the same deadline, is as late by the lead.

Auto Scaling's answer tells its clock (its Date header, to the second, stamped before the answer left): the
renewal is recorded from the earlier of the caller's time before the call and that Date. A clock on time or behind
records what it did before (``now``, no later than the heartbeat); one ahead records Auto Scaling's."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from nodecycle.domain.engine import EngineTiming, Outcome, StepEngine
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import FakeClock
from tests.unit.foundation.test_engine import HEARTBEAT, MARGIN, PLAN, World, make_record

# The template's work queues' visibility timeout: how late a step's retry may come after one fault
ONE_FAULT = 150
# The skewed container's clock over Auto Scaling's: more than a margin and one fault's retry
AHEAD = timedelta(minutes=4)
POLL = 10  # seconds between a drain's looks at its pods


@dataclass
class Ahead:
    """A container clock that runs ``by`` ahead of ``of`` (the test's, on which Auto Scaling's timeouts run)."""

    of: FakeClock
    by: timedelta

    def now(self) -> datetime:
        return self.of.now() + self.by


def drain_engine(world: World, clock: FakeClock | Ahead) -> StepEngine:
    """The drain function's engine on ``clock``, polling a drain that never ends by itself."""
    return StepEngine(
        worker=Worker.DRAIN,
        steps={
            Step.EVICT: lambda record, now: Outcome.wait(POLL),
            Step.CLEANUP: lambda record, now: Outcome.next(),
        },
        records=world.records,
        queues=world.queues,
        autoscaling=world.autoscaling,
        clock=clock,
        metrics=world.metrics,
        timing=EngineTiming(
            resume_grace=timedelta(seconds=60),
            heartbeat_margin=timedelta(seconds=MARGIN),
            redelivery=timedelta(seconds=ONE_FAULT),
            settle_before=timedelta(seconds=MARGIN + ONE_FAULT),
        ),
        failure_result=lambda record: ActionResult.CONTINUE,
    )


def test_a_heartbeat_recorded_on_a_clock_minutes_ahead_does_not_let_the_action_time_out_mid_drain() -> None:
    # Given a drain polling its pods every 10 s under a hook of a 300 s heartbeat timeout
    world = World(redelivery=ONE_FAULT)
    world.records.create(make_record(PLAN, Step.EVICT, node="n1", seq=3))
    on_time = drain_engine(world, world.clock)
    skewed = drain_engine(world, Ahead(world.clock, AHEAD))

    # When one poll, past the point where a heartbeat is due, runs in a container whose clock is 4 minutes ahead
    world.clock.advance(HEARTBEAT - MARGIN - ONE_FAULT + 1)
    world.queues.take()
    skewed.handle(world.message())
    # (it heartbeated: Auto Scaling renewed the action from now, on its own clock)
    assert len(world.autoscaling.heartbeats) == 1
    # And the drain's next polls run on clocks that are right, for the next 20 minutes
    end = world.clock.now() + timedelta(minutes=20)
    while (record := world.record()).due_at <= end and record.step is Step.EVICT:
        world.clock.current = max(world.clock.current, record.due_at)
        world.queues.take()
        on_time.handle(world.message())

    # Then the action stays alive: every heartbeat after the skewed one came before Auto Scaling's deadline
    record = world.record()
    assert record.outcome != "action-expired", f"the action timed out at {record.updated_at}"
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 0
    assert record.step is Step.EVICT
    # And the record's deadline is never later than Auto Scaling's
    assert record.heartbeat_deadline <= world.autoscaling.expires_at(record.token)
