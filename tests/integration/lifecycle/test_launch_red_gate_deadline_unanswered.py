"""The launch readiness gate of a hook whose global timeout comes before the readiness timeout, against an API
server that fails every read for the whole window: the sandbox API server (its fault layer), the lifecycle run by
the step engine on the test's clock, its guard where the drain function puts it (settle_before = the policy's
settle margin). The gate's deadline is two polls before the guard's point, so that the gate, not the guard,
settles a launch whose node does not come (see ReadinessGate._deadline): also when its looks get no answer, whose
retries the engine backs off by up to 3 minutes."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.completion import CompleteAction
from nodecycle.domain.launch import ReadinessGate
from nodecycle.domain.model import Step, global_deadline
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server, eks_describing
from tests.support.fakes import T0, LaunchingGroup
from tests.support.readiness_gates import Dns
from tests.unit.drain.test_drain_steps import launching, readiness, wakes_to_nowhere
from tests.unit.foundation.test_engine import MARGIN, World

HEARTBEAT = 300  # the hook's heartbeat timeout: its global timeout 30,000 s (100 of them)
TIMEOUT = 36_000  # the readiness timeout: past the hook's global timeout
POLL = 10


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with drain_server({"nodes": []}) as kube:
        yield kube


def test_a_gate_whose_every_look_fails_times_out_itself_before_the_guard_settles_its_launch(
    server: KubeServer,
) -> None:
    # Given a launch whose gate ends before the hook's global timeout (its deadline two polls before the point
    # where the engine's guard completes the action), and an API server failing every read of nodes (500)
    policy = readiness(readiness_timeout_seconds=str(TIMEOUT), drain_poll_seconds=str(POLL))
    # (the engine's guard where the drain function puts it: the policy's settle margin before the global timeout)
    world = World(redelivery=policy.settle_margin.total_seconds() - MARGIN)
    world.autoscaling.action_timeout = HEARTBEAT
    record = launching(
        heartbeat_timeout=HEARTBEAT,
        heartbeat_deadline=T0 + timedelta(seconds=HEARTBEAT),
        global_deadline=global_deadline(T0, HEARTBEAT),
    )
    guard_point = record.global_deadline - policy.settle_margin
    server.faults.arm([Fault("etcd", "kube-error", target="* nodes")], seed=38)
    with eks_describing(server):
        access = EksCluster("sandbox")
        cluster = KubeCluster(access.api_client)
        gate = ReadinessGate(
            finder=NodeFinder(cluster, Dns()),
            cluster=cluster,
            instances=Dns(),
            autoscaling=LaunchingGroup(),
            dispatcher=wakes_to_nowhere(),
            policy=policy,
            metrics=world.metrics,
            events=KubeEvents(access.api_client, owner="nodecycle"),
        )
        world.records.create(record)
        engine = world.engine(
            {Step.READY_GATE: gate, Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}
        )

        # When its messages come, each when it is due, until the gate ends
        record = world.record()
        while record.step is Step.READY_GATE:
            world.clock.current = max(world.clock.current, record.due_at)
            engine.handle(world.message(record.id))
            record = world.record()

    # Then the gate timed out itself, as the readiness timeout it is (its alarm), with the failure policy's
    # result, before the guard's point: not settled by the guard as an action near its global timeout (the
    # alarm of lifecycles nodecycle could not finish)
    assert (record.result, record.outcome) == (ActionResult.ABANDON, "readiness-unknown")
    assert record.completed_at is not None
    assert record.completed_at < guard_point
    assert world.metrics.counts["ReadinessTimeouts"] == 1
    assert world.metrics.counts.get("GlobalTimeoutsNear", 0) == 0
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.ABANDON]
