"""The sweep keeps alive an action no step confirmed yet through the confirmation (``Autoscaling.confirm``: a look
where the instance is, DescribeAutoScalingInstances, then the heartbeat), so that a token named with another group
than its action's is not kept alive for it. While that look was throttled past the client's retries (a refresh of
hundreds of nodes: every drain's confirmation and the sweeps share Auto Scaling's rate) the heartbeat was never made:
with the queue stalled since intake wrote the lifecycles, the sweeper alone keeps their actions alive, and they lapsed
at their heartbeat timeout, their nodes terminated undrained (invariant 11). A heartbeat by the instance alone only
extends an action; the lifecycle stays unconfirmed, and its step looks before it disrupts anything."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import ActionRef, Step
from nodecycle.domain.sweep.sweep_time import RESERVE, SweepTime
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
    # (Auto Scaling knows the hook and instance of each action it starts: one named by its instance alone is found)
    repair.autoscaling.issue(record.token, record.instance_id, hook=(record.group, record.hook))
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


def test_a_stalled_refreshs_unconfirmed_actions_are_all_kept_alive_by_a_sweep_whose_looks_are_throttled() -> (
    None
):
    # Given thirty lifecycles intake wrote in a refresh, no step of them run yet (their queue stalled), of hooks of
    # 600 s
    repair = Repair()
    repair.autoscaling.action_timeout = 600
    tokens = [f"token-{n}" for n in range(30)]
    for n, token in enumerate(tokens):
        instance = f"i-{n:017x}"
        repair.autoscaling.issue(token, instance, hook=("nodes", "terminate"))
        begun = make_record(PLAN, Step.ACQUIRE_SLOT, verified_at=None, heartbeat_timeout=600)
        assert repair.records.create(
            begun.model_copy(
                update={
                    "id": f"{instance}/terminate/{token}",
                    "instance_id": instance,
                    "token": token,
                    "heartbeat_deadline": begun.started_at + timedelta(seconds=600),
                }
            )
        )
    repair.clock.advance(60)

    # ... and each look where an instance is (DescribeAutoScalingInstances) throttled through the client's retries
    # and backoffs: 15 s each
    def look_throttled(action: ActionRef) -> bool:
        repair.clock.advance(15)
        raise TransientError("reading an instance's group and lifecycle state: Throttling: Rate exceeded")

    repair.autoscaling.confirm = look_throttled  # type: ignore[method-assign]

    # When a sweep of the lifecycles runs, with the time a sweep's part has (300 s, less the reserve)
    ends = repair.clock.now() + timedelta(seconds=300)
    time = SweepTime(lambda: (ends - repair.clock.now()).total_seconds(), RESERVE)
    with pytest.raises(SweepFailed):
        repair.part()(list(repair.records.open_records("stack-a")), repair.clock.now(), time)

    # Then every action was kept alive (before: the sweep ran out of time after a dozen and a half looks, and the
    # rest lapsed before the next)
    unkept = [
        t
        for t in tokens
        if repair.autoscaling.expires_at(t) <= make_record(PLAN).started_at + timedelta(seconds=600)
    ]
    assert unkept == []
