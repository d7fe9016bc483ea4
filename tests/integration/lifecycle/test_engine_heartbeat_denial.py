"""Heartbeats refused to every nodecycle role (a service control policy rolled out, the sweeper's role included)
for longer than the hook's heartbeat timeout: nothing can keep the action alive, and Auto Scaling ends it with
the hook's default result. Invariant 11's other half holds: it does not pass unseen. The sweeper's refused
heartbeat fails its run (its Errors alarm), and the lifecycle says the action expired (the expired-actions
alarm), never that nodecycle completed it."""

from __future__ import annotations

import pytest

from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.faults import Fault
from tests.integration.lifecycle.harness import (
    held_by_a_budget,
    record_of,
    swept_every_two_seconds,
    terminate_action,
    wait_terminated,
)

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 10


def test_heartbeats_refused_to_the_sweeper_too_end_the_action_by_its_timeout_and_fail_the_sweeps() -> None:
    # Given hooks with a 10 s heartbeat timeout, a sweeper every 2 s, and a node whose drain waits for a pod
    # its PodDisruptionBudget never lets go (the drain runs on, heartbeating, until its timeout)
    with swept_every_two_seconds(HEARTBEAT_TIMEOUT) as sandbox:
        _, victim = held_by_a_budget(sandbox)
        sandbox.asg.terminate(victim)
        wait_for(
            lambda: (action := terminate_action(sandbox, victim)) is not None and len(action.heartbeats) >= 2,
            60,
            "the drain heartbeating its action",
        )
        before = len(sandbox.runner.journal.invocations("SweeperFunction"))

        # When Auto Scaling refuses every heartbeat of every nodecycle function (drain, wake, eip, sweeper)
        callers = [
            sandbox.runner.access_key(function)
            for function in ("DrainFunction", "WakeFunction", "EipFunction", "SweeperFunction")
        ]
        sandbox.aws.arm_faults(
            faults=[Fault("scp", "aws-denied", target="autoscaling.RecordLifecycleActionHeartbeat")],
            seed=1,
            callers=callers,
        )
        try:
            action = wait_terminated(sandbox, victim, timeout=6 * HEARTBEAT_TIMEOUT)
            sweeps = sandbox.runner.journal.invocations("SweeperFunction")[before:]
        finally:
            sandbox.aws.disarm_faults()

        # Then the action ended by its heartbeat timeout (no call could keep it alive), and the sweeps that
        # ran meanwhile failed (the sweeper's Errors alarm), their refused heartbeat named
        assert (action.outcome, action.completed_by) == ("heartbeat-timeout", None)
        failed = [s for s in sweeps if not s.ok]
        assert failed, "no sweep failed while every heartbeat was refused: no alarm"
        errors = [s.error or "" for s in failed]
        # (by the part that kept the action alive: the first, when its heartbeat could not wait for the orphans'
        # part, else the lifecycles')
        assert any(
            "sweep parts failed: last-chances" in error or "sweep parts failed: lifecycles" in error
            for error in errors
        ), errors

        # And once the refusal is over, the lifecycle says the action expired (LifecycleActionsExpired: the
        # expired-actions alarm), not that nodecycle completed it
        done = wait_for(
            lambda: (r := record_of(sandbox, victim)).outcome == "action-expired" and r,
            60,
            "the lifecycle finding its action expired",
        )
        assert done.completed_at is None
