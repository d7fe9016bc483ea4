"""A wait chained past SQS's 900 s delay limit, whose piece is delivered to a container whose clock runs behind.

SQS delays a message 15 minutes at most, so a longer wait comes back early and is snoozed (sent again) for the rest
of it. Whether a message is early is judged on SQS's clock too (its ApproximateFirstReceiveTimestamp), so a container
minutes behind no longer snoozes a message that is on time. But the rest of the wait was still measured from the
container's own clock: one 4 minutes behind read the rest of the wait as 4 minutes longer than it is and delayed the
next piece that much. A step due at the last safe run for its heartbeat (under a hook whose heartbeat timeout is
longer than SQS's delay limit) then ran after Auto Scaling's deadline: the action timed out mid-drain with the hook's
default result (invariants 2 and 11). SQS's time of the delivery bounds the real time from below: the rest of the
wait is measured from it."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.domain.model import Step, global_deadline
from tests.support.fakes import T0
from tests.unit.foundation.test_engine import MARGIN, PLAN, World, make_record
from tests.unit.review.test_rcomplete_heartbeat_on_a_clock_ahead import (
    AHEAD,
    ONE_FAULT,
    Ahead,
    delivered,
    drain_engine,
)

HOOK_TIMEOUT = 1800  # a hook's heartbeat timeout past SQS's 900 s delay limit: a wait up to it is chained


def test_the_rest_of_a_chained_wait_is_measured_on_sqs_clock_not_on_a_container_clock_behind() -> None:
    # Given a drain whose next poll is due at the last safe run for its heartbeat (the deadline less a margin and one
    # fault's retry), 1590 s on: its message is delayed 900 s (SQS's limit), then snoozed for the rest
    world = World(redelivery=ONE_FAULT)
    world.autoscaling.action_timeout = HOOK_TIMEOUT
    last_safe_run = T0 + timedelta(seconds=HOOK_TIMEOUT - MARGIN - ONE_FAULT)
    world.records.create(
        make_record(
            PLAN,
            Step.EVICT,
            node="n1",
            seq=3,
            due_at=last_safe_run,
            heartbeat_timeout=HOOK_TIMEOUT,
            heartbeat_deadline=T0 + timedelta(seconds=HOOK_TIMEOUT),
            global_deadline=global_deadline(T0, HOOK_TIMEOUT),
        )
    )
    behind = drain_engine(world, Ahead(world.clock, -AHEAD))
    on_time = drain_engine(world, world.clock)

    # When SQS delivers the first piece at 900 s, on time for its delay, to a container 4 minutes behind
    world.clock.advance(900)
    world.queues.take()
    delivered(world, behind)
    (sent,) = world.queues.take()
    rest = last_safe_run - world.clock.now()
    # And the next piece runs when it comes, on a clock that is right
    world.clock.advance(sent.delay)
    delivered(world, on_time)

    # Then it heartbeated before Auto Scaling's deadline: the action is still alive
    record = world.record()
    assert record.outcome != "action-expired", f"the action timed out before {world.clock.now()}"
    assert world.autoscaling.heartbeats
    # And the snooze was for the rest of the wait by SQS's clock (690 s), not by the container's (930 s, cut to 900)
    assert sent.delay == rest.total_seconds()
