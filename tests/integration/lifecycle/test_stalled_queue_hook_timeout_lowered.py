"""A hook's heartbeat timeout lowered while one of its actions is open and its work queue stalled: the sweeper keeps
the action alive by the hook's timeout as it is now, not the one its record took at intake.

RecordLifecycleActionHeartbeat "extends the timeout by the length of time defined using the PutLifecycleHook API call"
(its API reference): a heartbeat after the hook was changed extends the action by the new timeout (AWS documents no
action keeping its hook's timeout from its start; the sandbox takes that reading). An operator lowering a hook's
timeout (a stack update, the runbook's advice on another group) while a refresh's drains are stalled had the sweeper
heartbeat each action a record's timeout apart: the action lapsed in between, its node terminated undrained by the
hook's default result (invariant 11)."""

from __future__ import annotations

import time

import pytest

from nodecycle_sandbox.aws.group import wait_for
from tests.integration.lifecycle.harness import (
    find_record,
    node_of,
    record_of,
    swept_every_two_seconds,
    terminate_action,
)

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 16  # the hook's when the action starts (its record's)
LOWERED = 8  # the hook's once an operator lowered it (above the 7 s a 2 s sweep and a 5 s margin need)
# How long the action is watched from its start: the record's timeout, then two lowered ones. A sweeper that times
# its heartbeats by the record's timeout lets the action lapse by then: its first heartbeat comes by the record's
# timeout (11 s in, a margin before it, give or take a sweep), and extends the action by the lowered 8 s, while its
# next comes the record's 11 s later; the action lapses some 19 to 24 s in, the watch ends 32 s in.
WATCHED = HEARTBEAT_TIMEOUT + 2 * LOWERED


def test_a_stalled_action_is_kept_alive_by_its_hooks_lowered_timeout() -> None:
    # Given hooks with a 16 s heartbeat timeout, a sweeper every 2 s, and the drain function's queue stalled
    with swept_every_two_seconds(HEARTBEAT_TIMEOUT) as sandbox:
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, victim)
        sandbox.runner.set_sources_enabled("DrainFunction", False)

        # When the instance terminates, intake records its lifecycle, and an operator then lowers the terminate
        # hook's heartbeat timeout to 8 s
        sandbox.asg.terminate(victim)
        wait_for(lambda: find_record(sandbox, victim), 20, "the lifecycle's record")
        action = terminate_action(sandbox, victim)
        assert action is not None
        assert action.active
        sandbox.client("autoscaling").put_lifecycle_hook(
            AutoScalingGroupName=action.group,
            LifecycleHookName=action.hook,
            LifecycleTransition="autoscaling:EC2_INSTANCE_TERMINATING",
            HeartbeatTimeout=LOWERED,
            DefaultResult="CONTINUE",
        )

        # Then, through the record's heartbeat timeout and two lowered ones, the action is kept alive (a heartbeat at
        # least every lowered timeout), never ended by the hook's default result, and nothing was disrupted meanwhile
        until = action.started_at + WATCHED
        while time.time() < until:
            now = terminate_action(sandbox, victim)
            assert now is not None
            assert now.active, (
                f"the action ended while the queue was stalled: {now.outcome}, heartbeats at "
                f"{[round(beat - now.started_at, 1) for beat in now.heartbeats]} s"
            )
            time.sleep(0.5)
        kept = terminate_action(sandbox, victim)
        assert kept is not None
        assert len(kept.heartbeats) >= 3
        assert sandbox.kube.node_for_instance(victim) == node
        # And the lifecycle's record now times heartbeats by the lowered timeout (the engine's too, once it runs)
        assert record_of(sandbox, victim).heartbeat_timeout == LOWERED
