"""The launch readiness gate on the real Kubernetes adapter (the sandbox API server), run by the step engine, for
a launch hook whose own global timeout (100 heartbeat timeouts) ends before the readiness timeout: the gate
times out itself before the engine must settle the action, so a node that never joins is told as a readiness
timeout (its alarm, for nodes that do not come up), not as an action near its global timeout (the alarm for
lifecycles nodecycle could not finish)."""

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
from tests.integration.kube.cluster import drain_server, eks_describing
from tests.support.fakes import T0, LaunchingGroup
from tests.support.readiness_gates import Dns
from tests.unit.drain.test_drain_steps import launching, readiness, wakes_to_nowhere
from tests.unit.foundation.test_engine import World

HEARTBEAT_TIMEOUT = 30  # seconds: the shortest Auto Scaling takes; its actions live 3,000 s at most


@pytest.fixture
def cluster() -> Iterator[tuple[KubeCluster, KubeEvents]]:
    # a cluster the launch's node never joins
    with drain_server({"nodes": []}) as server, eks_describing(server):
        access = EksCluster("sandbox")
        yield KubeCluster(access.api_client), KubeEvents(access.api_client, owner="nodecycle")


def test_a_gate_longer_than_its_hooks_global_timeout_times_out_itself_before_the_engine_settles_it(
    cluster: tuple[KubeCluster, KubeEvents],
) -> None:
    nodes, events = cluster
    # Given a readiness timeout of an hour, and a launch under a hook of a 30 s heartbeat timeout (its action
    # lives 50 minutes at most), confirmed at T0, whose node never joins
    world = World()
    world.autoscaling.action_timeout = HEARTBEAT_TIMEOUT
    launch = launching(
        verified_at=None,
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
        heartbeat_deadline=T0 + timedelta(seconds=HEARTBEAT_TIMEOUT),
        global_deadline=global_deadline(T0, HEARTBEAT_TIMEOUT),
    )
    world.records.create(launch)
    gate = ReadinessGate(
        finder=NodeFinder(nodes, Dns()),
        cluster=nodes,
        instances=Dns(),
        autoscaling=LaunchingGroup(),
        dispatcher=wakes_to_nowhere(),
        policy=readiness(readiness_timeout_seconds="3600", drain_poll_seconds="5"),
        metrics=world.metrics,
        events=events,
    )
    engine = world.engine(
        {Step.READY_GATE: gate, Step.COMPLETE: CompleteAction(world.autoscaling, world.metrics)}
    )

    # When its messages come, each when it is due
    record = world.record()
    while not record.finished:
        world.clock.current = max(world.clock.current, record.due_at)
        engine.handle(world.message(record.id))
        record = world.record()

    # Then the gate timed out itself, with the failure policy's result, before the action's global timeout:
    # a readiness timeout, not a global timeout near
    assert record.outcome == "node-never-joined", record.outcome
    assert world.metrics.counts.get("ReadinessTimeouts") == 1
    assert world.metrics.counts.get("GlobalTimeoutsNear", 0) == 0
    assert [result for _, result in world.autoscaling.completed] == [ActionResult.ABANDON]
    assert record.completed_at is not None
    assert record.completed_at < record.global_deadline
