"""The sweep keeps alive an action no step confirmed yet through the confirmation (``Autoscaling.confirm``: a look
where the instance is, DescribeAutoScalingInstances, then the heartbeat), so that a token named with another group
than its action's is not kept alive for it. While that look was throttled past the client's retries (a refresh of
hundreds of nodes: every drain's confirmation and the sweeps share Auto Scaling's rate) the heartbeat was never made:
with the queue stalled since intake wrote the lifecycles, the sweeper alone keeps their actions alive, and they lapsed
at their heartbeat timeout, their nodes terminated undrained (invariant 11). A heartbeat by the token alone only
extends an action; the lifecycle stays unconfirmed, and its step looks before it disrupts anything."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.sweep.sweeper import SweepFailed
from tests.unit.foundation.test_engine import PLAN, make_record
from tests.unit.sweeper.test_sweeper import INTERVAL, Repair


@pytest.mark.parametrize(
    "failure",
    [
        TransientError("reading an instance's group and lifecycle state: Throttling: Rate exceeded"),
        AccessRefused(
            "reading an instance's group and lifecycle state",
            "AccessDenied",
            "not authorized to perform: autoscaling:DescribeAutoScalingInstances",
        ),
    ],
    ids=["throttled", "denied"],
)
def test_an_unconfirmed_action_is_kept_alive_while_the_look_before_its_heartbeat_fails(
    failure: Exception,
) -> None:
    # Given a lifecycle intake wrote, no step of it run yet (its queue stalled), whose hook's heartbeat timeout is
    # 600 s
    repair = Repair()
    repair.autoscaling.action_timeout = 600
    record = make_record(PLAN, Step.ACQUIRE_SLOT, verified_at=None, heartbeat_timeout=600).model_copy(
        update={"heartbeat_deadline": make_record(PLAN).started_at + timedelta(seconds=600)}
    )
    assert repair.records.create(record)
    repair.clock.advance(60)

    # ... and Auto Scaling refusing the look where its instance is (DescribeAutoScalingInstances): throttled past the
    # client's retries, or denied to the sweeper's role alone
    def look_failed(action: ActionRef) -> bool:
        raise failure

    repair.autoscaling.confirm = look_failed  # type: ignore[method-assign]

    # When the sweeps run on schedule for longer than the heartbeat timeout
    for _ in range(4):
        with pytest.raises(SweepFailed):  # (a sweep that could not confirm it fails: its alarm)
            repair.run()
        repair.clock.advance(INTERVAL.total_seconds())

        # Then the action is alive at each
        assert repair.autoscaling.expires_at(record.token) > repair.clock.now(), repair.clock.now()
    current = repair.records.get(record.id)
    assert current is not None
    assert current.verified_at is None
