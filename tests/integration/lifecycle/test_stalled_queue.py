"""A stalled work queue costs time, never an undrained termination: the sweeper keeps the action alive (and
counts it as stalled, for the alarm) until the queue moves again, and the drain then finishes as usual."""

from __future__ import annotations

import pytest

from nodecycle_sandbox.aws.group import wait_for
from nodecycle_sandbox.checks import completed_before_drained
from tests.integration.lifecycle.harness import (
    node_of,
    swept_every_two_seconds,
    terminate_action,
    wait_terminated,
)

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 10


def test_the_sweeper_keeps_a_stalled_drain_alive_until_its_queue_moves_again() -> None:
    # Given hooks with a 10 s heartbeat timeout, a sweeper every 2 s, and the drain function's queue stalled
    # (its event source disabled, as a throttled or failing function would leave it)
    with swept_every_two_seconds(HEARTBEAT_TIMEOUT) as sandbox:
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, victim)
        sandbox.runner.set_sources_enabled("DrainFunction", False)

        # When the instance terminates and nothing consumes the drain queue until a sweep has reported the
        # lifecycle stalled (its message overdue by the resume grace, 20 s: two heartbeat timeouts) and the action
        # has had a heartbeat since (waited for, not slept: a fixed 30 s was most of the file's time; the wait
        # ends at once, failing below, if the action ends meanwhile)
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
            return len(action.heartbeats) > beats_when_stalled[0]

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
