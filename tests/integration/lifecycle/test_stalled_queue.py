"""A stalled work queue costs time, never an undrained termination: the sweeper keeps the action alive (and
counts it as stalled, for the alarm) until the queue moves again, and the drain then finishes as usual."""

from __future__ import annotations

import time

import pytest

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

        # When the instance terminates and nothing consumes the drain queue for three heartbeat timeouts
        sandbox.asg.terminate(victim)
        time.sleep(3 * HEARTBEAT_TIMEOUT)

        # Then the action is still open (the hook's default result was never applied), on the sweeper's
        # heartbeats, and the sweeper reported the lifecycle as stalled
        action = terminate_action(sandbox, victim)
        assert action is not None
        assert action.active, f"the action ended while the queue was stalled: {action.outcome}"
        assert len(action.heartbeats) >= 2
        sweeps = sandbox.runner.journal.invocations("SweeperFunction")
        assert any((s.response or {}).get("LifecyclesStalled", 0) >= 1 for s in sweeps)
        assert sandbox.kube.node_for_instance(victim) == node  # nothing was disrupted meanwhile

        # When the queue moves again
        sandbox.runner.set_sources_enabled("DrainFunction", True)

        # Then the node is drained and the action completed by nodecycle, not by a timeout
        done = wait_terminated(sandbox, victim, timeout=90)
        assert (done.outcome, done.completed_by is not None) == ("completed", True)
        assert completed_before_drained(sandbox.kube.history(), [done]) == []
