"""Lifecycle actions kept alive and bounded: a drain longer than the hook's heartbeat timeout survives on
heartbeats; the launch readiness gate completes once the node is Ready, and gives up on one that never joins."""

from __future__ import annotations

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox.aws.group import HookSpec
from nodecycle_sandbox.aws.records import LAUNCHING, TERMINATING
from nodecycle_sandbox.checks import completed_before_drained
from tests.integration.lifecycle.harness import (
    node_of,
    record_of,
    running,
    wait_for,
    wait_terminated,
)

pytestmark = pytest.mark.slow

HEARTBEAT_TIMEOUT = 10
# A pod that takes just over two heartbeat timeouts to stop: the drain outlives two of them, on heartbeats alone
SLOW_SHUTDOWN = 2 * HEARTBEAT_TIMEOUT + 1


def test_a_drain_longer_than_the_heartbeat_timeout_stays_alive_through_heartbeats() -> None:
    # Given hooks with a 10 s heartbeat timeout, and a pod that takes 21 s to stop on the node to drain
    hooks = (
        HookSpec("nodecycle-launch", LAUNCHING, HEARTBEAT_TIMEOUT, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, HEARTBEAT_TIMEOUT, "ABANDON"),
    )
    parameters = {"HeartbeatMarginSeconds": "5", "DrainTimeoutSeconds": "120"}
    with running(parameters=parameters, size=2, hooks=hooks, workloads=None) as sandbox:
        victim = sorted(sandbox.asg.in_state("InService"))[0]
        node = node_of(sandbox, victim)
        sandbox.kube.seed(
            {
                "namespaces": ["batch"],
                "objects": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {
                            "name": "slow-shutdown",
                            "namespace": "batch",
                            "annotations": {"sandbox.nodecycle.io/shutdown-seconds": str(SLOW_SHUTDOWN)},
                        },
                        "spec": {
                            "nodeName": node,
                            "terminationGracePeriodSeconds": 60,
                            "containers": [{"name": "main", "image": "busybox"}],
                        },
                    }
                ],
            }
        )
        sandbox.kube.settle()

        # When its instance terminates
        sandbox.asg.terminate(victim)
        action = wait_terminated(sandbox, victim, timeout=90)

        # Then the action outlived several heartbeat timeouts on heartbeats and was completed after the pod left
        assert action.outcome == "completed"
        assert action.result == "CONTINUE"  # not the hook's default ABANDON: it did not time out
        assert action.finished_at - action.started_at > 2 * HEARTBEAT_TIMEOUT  # type: ignore[operator]
        assert len(action.heartbeats) >= 2
        gaps = [
            b - a for a, b in zip([action.started_at, *action.heartbeats], action.heartbeats, strict=False)
        ]
        assert max(gaps) < HEARTBEAT_TIMEOUT
        assert completed_before_drained(sandbox.kube.history(), [action]) == []
        assert record_of(sandbox, victim).heartbeats == len(action.heartbeats)


def test_the_readiness_gate_completes_when_ready_and_gives_up_on_a_node_that_never_joins() -> None:
    parameters = {"ReadinessTimeoutSeconds": "30", "ReadinessFailureResult": "ABANDON"}
    with running(parameters=parameters, size=1, workloads=None) as sandbox:
        # Given the group's first instance, launched through the gate
        (first,) = sandbox.asg.in_state("InService")
        (launch,) = [a for a in sandbox.asg.actions(transition=LAUNCHING) if a.instance_id == first]
        ready_at = min(
            e.time
            for e in sandbox.kube.history()
            if e.kind == "Node"
            and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (e.object.get("status") or {}).get("conditions") or []
            )
        )
        # Then it was completed CONTINUE, and only once its node was Ready
        assert (launch.outcome, launch.result) == ("completed", "CONTINUE")
        assert launch.finished_at >= ready_at  # type: ignore[operator]
        assert record_of(sandbox, first, Transition.LAUNCHING).outcome == "node-ready"

        # Given a next instance whose node never joins
        sandbox.aws.plan_nodes(never_join=True)
        sandbox.asg.set_desired(2)
        stranger = wait_for(
            lambda: [a for a in sandbox.asg.actions(transition=LAUNCHING) if a.instance_id != first],
            30,
            "a launch",
        )[0]

        # Then after the readiness timeout the gate completes it with the configured result
        settled = wait_for(
            lambda: next(
                (
                    a
                    for a in sandbox.asg.actions(transition=LAUNCHING)
                    if a.token == stranger.token and not a.active
                ),
                None,
            ),
            75,
            "the launch of an instance whose node never joins",
        )
        assert (settled.outcome, settled.result) == ("completed", "ABANDON")
        assert settled.finished_at is not None
        assert settled.finished_at - settled.started_at >= 30
        assert record_of(sandbox, stranger.instance_id, Transition.LAUNCHING).outcome == "node-never-joined"
