"""Lifecycle actions kept alive and bounded: a drain longer than the hook's heartbeat timeout survives on
heartbeats; the launch readiness gate completes once the node is Ready, and gives up on one that never joins.

Both on one sandbox, set going at once: the drain waits out a pod's 21 s stop and the gate its 38 s timeout, and
one after the other, on a sandbox each, the file took two sandboxes' starts and the sum of those waits. The
terminate hook's heartbeat timeout is 10 s; the launch hook's is 30 s, the shortest AWS takes (PutLifecycleHook:
HeartbeatTimeout from 30 to 7200 s), under a readiness timeout longer than it, so that the gate's launch lives on
its heartbeats until the gate gives up (a 10 s launch hook, under the heartbeat margin and a redelivery the
settings need, lapsed on a loaded machine). The terminate is a scale-in (no replacement), so that the one launch
after the group's first two is the gate's node that never joins."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from nodecycle.domain.model import Transition
from nodecycle_sandbox import Sandbox
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

HEARTBEAT_TIMEOUT = 10  # the terminate hook's
LAUNCH_HEARTBEAT_TIMEOUT = 30  # the launch hook's: AWS's shortest, shorter than the gate's wait
# A pod that takes just over two heartbeat timeouts to stop: the drain outlives two of them, on heartbeats alone
SLOW_SHUTDOWN = 2 * HEARTBEAT_TIMEOUT + 1
# The gate gives up 8 s past the launch hook's timeout: its action, unless a heartbeat kept it, has lapsed by then
# (the hook's default result) whatever the load; 15 s past it waited 7 s more for nothing
READINESS_TIMEOUT = LAUNCH_HEARTBEAT_TIMEOUT + 8


@dataclass(frozen=True)
class Started:
    sandbox: Sandbox
    kept: str  # an instance of the group's first launches, left in service
    victim: str  # scaled in, a pod that takes SLOW_SHUTDOWN seconds to stop on its node
    first_launches: tuple[str, str]  # the group's first two instances, launched through the gate


@pytest.fixture(scope="module")
def started() -> Iterator[Started]:
    # A terminate hook with a 10 s heartbeat timeout, a launch hook with 30 s (their default results ABANDON); a
    # launch waits 38 s for its node, then is completed ABANDON
    hooks = (
        HookSpec("nodecycle-launch", LAUNCHING, LAUNCH_HEARTBEAT_TIMEOUT, "ABANDON"),
        HookSpec("nodecycle-terminate", TERMINATING, HEARTBEAT_TIMEOUT, "ABANDON"),
    )
    parameters = {
        "HeartbeatMarginSeconds": "5",
        "DrainTimeoutSeconds": "120",
        "ReadinessTimeoutSeconds": str(READINESS_TIMEOUT),
        "ReadinessFailureResult": "ABANDON",
    }
    with running(parameters=parameters, size=2, hooks=hooks, workloads=None) as sandbox:
        kept, victim = sorted(sandbox.asg.in_state("InService"))
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
                            "nodeName": node_of(sandbox, victim),
                            "terminationGracePeriodSeconds": 60,
                            "containers": [{"name": "main", "image": "busybox"}],
                        },
                    }
                ],
            }
        )
        sandbox.kube.settle()
        # The next instance's node never joins; the group scales out by one, and scales in the victim
        sandbox.aws.plan_nodes(never_join=1)
        sandbox.asg.set_desired(3)
        sandbox.asg.terminate(victim, decrement=True)
        yield Started(sandbox, kept, victim, (kept, victim))


def test_a_drain_longer_than_the_heartbeat_timeout_stays_alive_through_heartbeats(started: Started) -> None:
    # Given a terminate hook with a 10 s heartbeat timeout, and a pod that takes 21 s to stop on the node to drain
    # When its instance terminates (the fixture: scaled in)
    sandbox, victim = started.sandbox, started.victim
    action = wait_terminated(sandbox, victim, timeout=90)

    # Then the action outlived several heartbeat timeouts on heartbeats and was completed after the pod left
    assert action.outcome == "completed"
    assert action.result == "CONTINUE"  # not the hook's default ABANDON: it did not time out
    assert action.finished_at - action.started_at > 2 * HEARTBEAT_TIMEOUT  # type: ignore[operator]
    assert len(action.heartbeats) >= 2
    gaps = [b - a for a, b in zip([action.started_at, *action.heartbeats], action.heartbeats, strict=False)]
    assert max(gaps) < HEARTBEAT_TIMEOUT
    assert completed_before_drained(sandbox.kube.history(), [action]) == []
    assert record_of(sandbox, victim).heartbeats == len(action.heartbeats)


def test_the_readiness_gate_completes_when_ready_and_gives_up_on_a_node_that_never_joins(
    started: Started,
) -> None:
    sandbox = started.sandbox
    # Given the group's first instances, launched through the gate
    for first in started.first_launches:
        (launch,) = [a for a in sandbox.asg.actions(transition=LAUNCHING) if a.instance_id == first]
        node = node_of(sandbox, first)
        ready_at = min(
            e.time
            for e in sandbox.kube.history()
            if e.kind == "Node"
            and e.name == node
            and any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (e.object.get("status") or {}).get("conditions") or []
            )
        )
        # Then each was completed CONTINUE, and only once its node was Ready
        assert (launch.outcome, launch.result) == ("completed", "CONTINUE")
        assert launch.finished_at >= ready_at  # type: ignore[operator]
        assert record_of(sandbox, first, Transition.LAUNCHING).outcome == "node-ready"

    # Given a next instance whose node never joins (the fixture's scale-out)
    stranger = wait_for(
        lambda: [
            a
            for a in sandbox.asg.actions(transition=LAUNCHING)
            if a.instance_id not in started.first_launches
        ],
        30,
        "a launch",
    )[0]

    # Then after the readiness timeout, past its hook's heartbeat timeout on heartbeats, the gate completes it with
    # the configured result (not Auto Scaling's timeout with the hook's default)
    settled = wait_for(
        lambda: next(
            (
                a
                for a in sandbox.asg.actions(transition=LAUNCHING)
                if a.token == stranger.token and not a.active
            ),
            None,
        ),
        READINESS_TIMEOUT + 45,
        "the launch of an instance whose node never joins",
    )
    assert (settled.outcome, settled.result) == ("completed", "ABANDON")
    assert settled.finished_at is not None
    assert settled.finished_at - settled.started_at >= READINESS_TIMEOUT
    gaps = [
        b - a for a, b in zip([settled.started_at, *settled.heartbeats], settled.heartbeats, strict=False)
    ]
    assert settled.heartbeats
    assert max(gaps) < LAUNCH_HEARTBEAT_TIMEOUT
    assert record_of(sandbox, stranger.instance_id, Transition.LAUNCHING).outcome == "node-never-joined"
