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
records what it did before (``now``, no later than the heartbeat); one ahead records Auto Scaling's.

A clock minutes behind: SQS delivers a message no sooner than its delay, but such a container read a message on time
as minutes early and snoozed it that long (the snooze is for waits chained past SQS's 900 s delay limit), so a run
due at the last safe moment for its heartbeat came after the action timed out. Early is now judged by SQS's clock
too (the record's ApproximateFirstReceiveTimestamp), as the drain function's handler receives it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodecycle.domain.engine import EngineTiming, Outcome, StepEngine, StepHandler
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.entrypoints import run_work_record
from tests.support.fakes import T0, FakeClock
from tests.support.functions import LambdaContext
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


def drain_engine(
    world: World, clock: FakeClock | Ahead, steps: Mapping[Step, StepHandler] | None = None
) -> StepEngine:
    """The drain function's engine on ``clock``, polling a drain that never ends by itself (or running ``steps``)."""
    return StepEngine(
        worker=Worker.DRAIN,
        steps=steps
        or {
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


def delivered(world: World, engine: StepEngine) -> None:
    """The lifecycle's current message, delivered by SQS now (the test's clock, SQS's) to ``engine``'s function, as
    Lambda hands it over: one record of an SQS event, with SQS's attributes."""
    body = world.message().model_dump_json()
    first_receive = int(world.clock.now().timestamp() * 1000)
    record = {
        "messageId": "m-1",
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": "1",
            "ApproximateFirstReceiveTimestamp": str(first_receive),
        },
    }
    run_work_record(engine, world.metrics, record, LambdaContext())


def test_a_message_due_at_its_last_safe_run_read_on_a_clock_minutes_behind_still_heartbeats_in_time() -> None:
    # Given a drain whose next poll is due at the last safe run for its heartbeat (the heartbeat deadline less a
    # margin and one fault's retry), under a 300 s hook
    world = World(redelivery=ONE_FAULT)
    last_safe_run = T0 + timedelta(seconds=HEARTBEAT - MARGIN - ONE_FAULT)
    world.records.create(make_record(PLAN, Step.EVICT, node="n1", seq=3, due_at=last_safe_run))
    behind = drain_engine(world, Ahead(world.clock, -AHEAD))
    on_time = drain_engine(world, world.clock)

    # When SQS delivers its message on time to a container whose clock runs 4 minutes behind (it read the message as
    # 4 minutes early, and snoozed it that long: it came after the heartbeat deadline)
    world.clock.current = last_safe_run
    world.queues.take()
    delivered(world, behind)
    # And whatever it sent next runs when it comes, on a clock that is right
    (sent,) = world.queues.take()
    world.clock.advance(sent.delay)
    delivered(world, on_time)

    # Then the action is still alive: it was heartbeated in time
    record = world.record()
    assert record.outcome != "action-expired", f"the action timed out before {world.clock.now()}"
    assert world.autoscaling.heartbeats


def test_a_wait_chained_past_sqs_delay_limit_is_still_snoozed_until_its_due_time() -> None:
    # Given a step waiting an hour (SQS delays a message 15 minutes at most: the wait is chained)
    world = World(redelivery=ONE_FAULT)
    world.records.create(
        make_record(PLAN, Step.ACQUIRE_SLOT, seq=3, due_at=T0 + timedelta(hours=1), heartbeat_deadline=T0)
    )
    on_time = drain_engine(world, world.clock)

    # When its message comes 15 minutes on, on time by SQS's clock for its delay
    world.clock.advance(900)
    world.queues.take()
    delivered(world, on_time)

    # Then it is sent again for the rest of the wait, its step not run
    (sent,) = world.queues.take()
    assert sent.delay == 900
    assert world.record().seq == 3
