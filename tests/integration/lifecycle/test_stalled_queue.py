"""A stalled work queue costs time, never an undrained termination: the sweeper keeps the action alive (and
counts it as stalled, for the alarm) until the queue moves again, and the drain then finishes as usual."""

from __future__ import annotations

import pytest

from nodecycle_sandbox.aws.group import HookSpec, wait_for
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING
from nodecycle_sandbox.checks import completed_before_drained
from tests.integration.lifecycle.harness import (
    node_of,
    running,
    terminate_action,
    wait_terminated,
)

pytestmark = pytest.mark.slow

# The terminate hook's heartbeat timeout: the shortest a 2 s sweep and a 5 s heartbeat margin keep alive (as
# test_stalled_queue_hook_timeout_lowered.py's lowered hook). The test waits until the action is two of these old
# and a sweep has reported it stalled: at 10 s, with the harness's 20 s resume grace, that was 24 s of the test's wait.
HEARTBEAT_TIMEOUT = 8
# (the launch hook's: the launches of the sandbox's start, under cold starts, are not what this test is about)
LAUNCH_HEARTBEAT_TIMEOUT = 10
# How overdue a lifecycle's message is before a sweep reports it stalled (ResumeGraceSeconds): one heartbeat
# timeout, so the report comes before the action is two timeouts old, what the test waits for in any case
RESUME_GRACE = HEARTBEAT_TIMEOUT


def test_the_sweeper_keeps_a_stalled_drain_alive_until_its_queue_moves_again() -> None:
    # Given a terminate hook with an 8 s heartbeat timeout, a sweeper every 2 s (a 5 s heartbeat margin, an 8 s
    # resume grace), and the drain function's queue stalled (its event source disabled, as a throttled or failing
    # function would leave it)
    hooks = (
        HookSpec("nodecycle-launch", LAUNCHING, LAUNCH_HEARTBEAT_TIMEOUT, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, HEARTBEAT_TIMEOUT, "CONTINUE"),
    )
    with running(
        parameters={"HeartbeatMarginSeconds": "5", "ResumeGraceSeconds": str(RESUME_GRACE)},
        settings={"NODECYCLE_SWEEP_INTERVAL_MINUTES": str(2 / 60)},
        schedule_interval=2.0,
        size=2,
        hooks=hooks,
    ) as sandbox:
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, victim)
        sandbox.runner.set_sources_enabled("DrainFunction", False)

        # When the instance terminates and nothing consumes the drain queue until a sweep has reported the
        # lifecycle stalled (its message overdue by the resume grace) and the action has had a heartbeat since,
        # more than two heartbeat timeouts after it began (waited for, not slept: a fixed 30 s was most of the
        # file's time; the wait ends at once, failing below, if the action ends meanwhile)
        sandbox.asg.terminate(victim)
        beats_when_stalled: list[int] = []

        def kept_alive_after_the_stall_or_ended() -> bool:
            action = terminate_action(sandbox, victim)
            if action is None:
                return False
            if not action.active:
                return True
            if not beats_when_stalled:
                sweeps = sandbox.runner.journal.invocations("SweeperFunction")
                if any((s.response or {}).get("LifecyclesStalled", 0) >= 1 for s in sweeps):
                    beats_when_stalled.append(len(action.heartbeats))
                return False
            return (
                len(action.heartbeats) > beats_when_stalled[0]
                and max(action.heartbeats) > action.started_at + 2 * HEARTBEAT_TIMEOUT
            )

        wait_for(kept_alive_after_the_stall_or_ended, 6 * HEARTBEAT_TIMEOUT, "a heartbeat after the stall")

        # Then the action is still open (the hook's default result was never applied), on the sweeper's
        # heartbeats, and the sweeper reported the lifecycle as stalled
        action = terminate_action(sandbox, victim)
        assert action is not None
        assert action.active, f"the action ended while the queue was stalled: {action.outcome}"
        assert len(action.heartbeats) >= 2
        assert max(action.heartbeats) > action.started_at + 2 * HEARTBEAT_TIMEOUT  # alive past two timeouts
        sweeps = sandbox.runner.journal.invocations("SweeperFunction")
        assert any((s.response or {}).get("LifecyclesStalled", 0) >= 1 for s in sweeps)
        assert sandbox.kube.node_for_instance(victim) == node  # nothing was disrupted meanwhile

        # When the queue moves again
        sandbox.runner.set_sources_enabled("DrainFunction", True)

        # Then the node is drained and the action completed by nodecycle, not by a timeout
        done = wait_terminated(sandbox, victim, timeout=90)
        assert (done.outcome, done.completed_by is not None) == ("completed", True)
        assert completed_before_drained(sandbox.kube.history(), [done]) == []
