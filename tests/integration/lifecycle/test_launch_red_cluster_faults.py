"""The launch readiness gate against a cluster that fails, throttles or refuses it for its whole window: the real
Kubernetes adapter on the sandbox API server (its fault layer, its authentication), the lifecycle run by the step
engine on the test's clock. Whatever the API server does, the launch is settled by the gate at its readiness
timeout with the failure policy's result: not completed early, not left to the queue's dead-letter and the
global timeout; and while it waits, its action is kept alive by heartbeats when the hook's heartbeat timeout is
shorter than the wait."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.engine import MAX_RETRY_BACKOFF_SECONDS
from nodecycle.domain.launch import ReadinessGate
from nodecycle.domain.model import LifecycleRecord, Step, global_deadline
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_ROLE
from tests.integration.kube.cluster import drain_server, eks_describing
from tests.support.fakes import T0, LaunchingGroup
from tests.support.readiness_gates import Dns
from tests.unit.drain.test_drain_steps import launching, readiness, wakes_to_nowhere
from tests.unit.foundation.test_engine import World

TIMEOUT = 300  # the gate's readiness timeout, seconds
POLL = 10


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with drain_server({"nodes": []}) as kube:
        yield kube


@pytest.fixture
def gate(server: KubeServer) -> Iterator[tuple[World, ReadinessGate]]:
    """The gate as the drain function builds it (the adapter through EKS access), and the world it runs in."""
    world = World()
    with eks_describing(server):
        access = EksCluster("sandbox")
        cluster = KubeCluster(access.api_client)
        yield (
            world,
            ReadinessGate(
                finder=NodeFinder(cluster, Dns()),
                cluster=cluster,
                instances=Dns(),
                autoscaling=LaunchingGroup(),
                dispatcher=wakes_to_nowhere(),
                policy=readiness(readiness_timeout_seconds=str(TIMEOUT), drain_poll_seconds=str(POLL)),
                metrics=world.metrics,
                events=KubeEvents(access.api_client, owner="nodecycle"),
            ),
        )


def launch_until_the_gate_ends(world: World, gate: ReadinessGate, record: LifecycleRecord) -> LifecycleRecord:
    """The launch's lifecycle, each message handled when it is due, until its gate ends: the record then. A
    message the engine fails (raises) is what the queue would redeliver, then dead-letter: it fails the test."""
    world.records.create(record)
    engine = world.engine(
        {Step.READY_GATE: gate, Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}
    )
    record = world.record()
    while record.step is Step.READY_GATE:
        world.clock.current = max(world.clock.current, record.due_at)
        engine.handle(world.message(record.id))
        record = world.record()
    return record


@pytest.mark.parametrize(
    "fault",
    [
        Fault("apf", "kube-throttle", target="* nodes", value=30),  # 429, Retry-After: 30
        Fault("etcd", "kube-error", target="* nodes"),  # 500
        Fault("down", "kube-drop", target="*"),  # the connection closed: an API server going away
    ],
    ids=lambda fault: fault.kind,
)
def test_an_api_server_that_never_answers_the_gate_has_the_launch_settled_at_the_readiness_timeout(
    server: KubeServer, gate: tuple[World, ReadinessGate], fault: Fault
) -> None:
    # (holds: this test only) Given an API server that throttles, fails or drops every read of the gate, for
    # the whole readiness window
    world, ready_gate = gate
    server.faults.arm([fault], seed=38)

    # When the launch's messages come, each when it is due, until the gate ends
    record = launch_until_the_gate_ends(world, ready_gate, launching())

    # Then it is settled once, with the failure policy's result, as the gate's readiness timeout (its alarm):
    # not before the timeout, and no later than one retry's backoff after it (never the global timeout's)
    assert (record.result, record.outcome) == (ActionResult.ABANDON, "readiness-unknown")
    assert record.completed_at is not None
    latest = T0 + timedelta(seconds=TIMEOUT + 1.5 * MAX_RETRY_BACKOFF_SECONDS)
    assert T0 + timedelta(seconds=TIMEOUT) <= record.completed_at <= latest
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.ABANDON]
    assert world.metrics.counts["ReadinessTimeouts"] == 1


def test_a_cluster_that_no_longer_knows_the_drain_role_has_the_launch_settled_at_the_readiness_timeout(
    server: KubeServer, gate: tuple[World, ReadinessGate]
) -> None:
    # Given a cluster whose access entry for the drain function's role is gone (deleted, or the stack's role
    # recreated under another ARN): the function's key is now a session of a role the cluster does not know,
    # and every request is answered 401, also after the client's retry with a fresh token
    world, ready_gate = gate
    server.map_role("FOOBARKEY", DRAIN_ROLE.replace("DrainFunction", "Recreated"), "nodecycle-DrainFunction")

    # When the launch's messages come, each when it is due, until the gate ends
    record = launch_until_the_gate_ends(world, ready_gate, launching())

    # Then the gate settles it at its timeout, as it does a 403, rather than its message failing until the
    # dead-letter queue (the launch then held by the sweeper's keep-alive until its global timeout)
    assert (record.result, record.outcome) == (ActionResult.ABANDON, "readiness-refused")
    assert record.completed_at is not None
    assert record.completed_at <= T0 + timedelta(seconds=TIMEOUT + POLL)


def test_a_hook_whose_heartbeat_timeout_is_shorter_than_the_wait_is_kept_alive_until_the_gate_settles_it(
    server: KubeServer, gate: tuple[World, ReadinessGate]
) -> None:
    # (holds: this test only) Given a launch hook whose heartbeat timeout (120 s) is well under the readiness
    # timeout (300 s), and a node that never joins
    world, ready_gate = gate
    heartbeat = 120
    world.autoscaling.action_timeout = heartbeat
    record = launching(
        heartbeat_timeout=heartbeat,
        heartbeat_deadline=T0 + timedelta(seconds=heartbeat),
        global_deadline=global_deadline(T0, heartbeat),
    )

    # When the launch's messages come, each when it is due, until the gate ends
    record = launch_until_the_gate_ends(world, ready_gate, record)

    # Then its action never lapsed: heartbeats kept it alive while the gate polled, and the gate's own timeout
    # completed it with the failure policy's result (Auto Scaling accepted the completion: still active)
    assert (record.result, record.outcome) == (ActionResult.ABANDON, "node-never-joined")
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.ABANDON]
    assert len(world.autoscaling.heartbeats) >= TIMEOUT // heartbeat
    assert world.metrics.counts.get("LifecycleActionsExpired", 0) == 0
