"""The sweep keeps alive an action no step confirmed yet through the confirmation (``Autoscaling.confirm``: a look
where the instance is, DescribeAutoScalingInstances, then the heartbeat), so that a token named with another group
than its action's is not kept alive for it. While that look was throttled past the client's retries (a refresh of
hundreds of nodes: every drain's confirmation and the sweeps share Auto Scaling's rate) the heartbeat was never made:
with the queue stalled since intake wrote the lifecycles, the sweeper alone keeps their actions alive, and they lapsed
at their heartbeat timeout, their nodes terminated undrained (invariant 11). A heartbeat by the token alone only
extends an action; the lifecycle stays unconfirmed, and its step looks before it disrupts anything."""

from __future__ import annotations

import contextlib
from datetime import timedelta

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ActionRef, Step
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, Repair


def test_an_unconfirmed_action_is_kept_alive_while_the_look_before_its_heartbeat_is_throttled() -> None:
    # Given a lifecycle intake wrote, no step of it run yet (its queue stalled), whose hook's heartbeat timeout is
    # 600 s
    repair = Repair()
    repair.autoscaling.action_timeout = 600
    record = make_record(PLAN, Step.ACQUIRE_SLOT, verified_at=None, heartbeat_timeout=600).model_copy(
        update={"heartbeat_deadline": make_record(PLAN).started_at + timedelta(seconds=600)}
    )
    assert repair.records.create(record)
    repair.clock.advance(60)

    # ... and Auto Scaling throttling the look where its instance is (DescribeAutoScalingInstances), past retries
    def look_throttled(action: ActionRef) -> bool:
        raise TransientError("reading an instance's group and lifecycle state: Throttling: Rate exceeded")

    repair.autoscaling.confirm = look_throttled  # type: ignore[method-assign]

    # When the sweeps run on schedule for longer than the heartbeat timeout
    for _ in range(4):
        with contextlib.suppress(Exception):  # (a sweep that could not confirm it fails: its alarm)
            repair.run()
        repair.clock.advance(INTERVAL.total_seconds())

        # Then the action is alive at each
        assert repair.autoscaling.expires_at(record.token) > repair.clock.now(), repair.clock.now()
    current = repair.records.get(record.id)
    assert current is not None
    assert current.verified_at is None
