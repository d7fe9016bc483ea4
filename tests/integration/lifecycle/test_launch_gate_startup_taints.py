"""The launch readiness gate and a node that is Ready but may not take pods yet: still carrying a taint that a
controller or an agent lifts once the node is set up (the node lifecycle controller's not-ready, the cloud
controller manager's uninitialized, a CNI's or a CSI driver's startup taint). Completed then, the launch puts the
instance in service (an instance refresh moves on to drain the next old node) while every pod evicted towards it
stays Pending. On the sandbox API server through the official client, as the drain function reads it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.launch import ReadinessGate
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import ActionResult
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_server, eks_describing
from tests.support.fakes import LaunchingGroup
from tests.support.readiness_gates import Dns
from tests.unit.drain.test_drain_steps import INSTANCE, NODE, launching, readiness, wakes_to_nowhere
from tests.unit.foundation.test_engine import World

POLL = 10


@pytest.fixture
def server() -> Iterator[KubeServer]:
    # kubelets renewing their Leases every 0.5 s: a Ready node's kubelet is seen running since the launch began
    with drain_server({"nodes": []}, node_lease_renew_seconds=0.5) as kube:
        yield kube


@pytest.fixture
def gate(server: KubeServer) -> Iterator[ReadinessGate]:
    world = World()
    with eks_describing(server):
        access = EksCluster("sandbox")
        cluster = KubeCluster(access.api_client)
        yield ReadinessGate(
            finder=NodeFinder(cluster, Dns()),
            cluster=cluster,
            instances=Dns(),
            autoscaling=LaunchingGroup(),
            dispatcher=wakes_to_nowhere(),
            policy=readiness(readiness_timeout_seconds="120", drain_poll_seconds=str(POLL)),
            metrics=world.metrics,
            events=KubeEvents(access.api_client, owner="nodecycle"),
        )


def launch() -> LifecycleRecord:
    """A launch timed by Auto Scaling's event, received a second later (its kubelet judged by the launch's start,
    not by a renewal since the gate's first read of its Lease: see ReadinessGate._kubelet_ran_since)."""
    record = launching()
    return record.model_copy(update={"received_at": record.started_at + timedelta(seconds=1)})


def set_taints(server: KubeServer, name: str, taints: list[dict[str, str]]) -> None:
    """The node's taints as their owner writes them (a JSON merge patch replaces the list), with the admin's
    identity: the kubelet's --register-with-taints, an agent or a controller lifting its own."""
    CoreV1Api(server.api_client()).patch_node(name, {"spec": {"taints": taints}})


@pytest.mark.parametrize(
    "taint",
    [
        # The cloud controller manager's, on every node a kubelet with --cloud-provider=external registers,
        # until it has set the node's provider id, zone and addresses
        {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
        # Cilium's, which its agent lifts once it manages the node's pod network (the kubelet may say Ready
        # before, on a CNI configuration already on disk)
        {"key": "node.cilium.io/agent-not-ready", "value": "true", "effect": "NoExecute"},
        # The EBS CSI driver's, which its node plugin lifts once it can attach volumes there
        {"key": "ebs.csi.aws.com/agent-not-ready", "effect": "NoExecute"},
    ],
    ids=lambda taint: taint["key"],
)
def test_a_ready_node_still_under_a_startup_taint_opens_the_gate_only_once_the_taint_is_lifted(
    server: KubeServer, gate: ReadinessGate, taint: dict[str, str]
) -> None:
    # Given a launch whose node registered with a startup taint and is Ready, its kubelet renewing its Lease
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
    set_taints(server, NODE, [taint])
    record = launch()
    now = record.started_at

    # When the gate looks while the taint is there
    for _ in range(3):
        outcome = gate(record, now)
        # Then it waits: no pod could be scheduled (or stay) there yet
        assert outcome.again, outcome.changes
        record = record.model_copy(update=dict(outcome.changes))
        now += timedelta(seconds=POLL)

    # And once the taint's owner lifts it, the next look opens the gate on that node
    set_taints(server, NODE, [])
    outcome = gate(record, now)
    assert (outcome.again, outcome.changes.get("outcome"), outcome.changes.get("node")) == (
        False,
        "node-ready",
        NODE,
    )


def test_a_ready_node_the_node_lifecycle_controller_has_not_untainted_yet_waits_for_it(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given a launch whose node registered NotReady: the API server's TaintNodesByCondition admission and the node
    # lifecycle controller taint it node.kubernetes.io/not-ready
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a", ready=False)
    server.settle()
    record = launch()
    now = record.started_at

    # When its kubelet posts Ready before the controller (its node monitor period, a busy controller manager) has
    # lifted the taint, and the gate looks meanwhile
    with server.paused_controllers():
        server.set_node_ready(NODE, True)
        tainted = server.get_object("nodes", NODE)
        assert tainted is not None
        assert "node.kubernetes.io/not-ready" in {t["key"] for t in tainted["spec"].get("taints") or []}
        outcome = gate(record, now)
    # Then it waits
    assert outcome.again, outcome.changes
    record = record.model_copy(update=dict(outcome.changes))
    now += timedelta(seconds=POLL)

    # And once the controller has lifted it, the next look opens the gate
    server.settle()
    outcome = gate(record, now)
    assert (outcome.again, outcome.changes.get("outcome")) == (False, "node-ready")


def test_a_ready_node_under_lasting_taints_of_its_own_opens_the_gate_at_its_first_look(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given a launch whose node is Ready with the taints its node group keeps for good (a dedicated group's, one
    # that only prefers pods elsewhere): they are the node's purpose, no controller lifts them
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
    set_taints(
        server,
        NODE,
        [
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
            {"key": "example.com/agent-not-ready", "effect": "PreferNoSchedule"},
        ],
    )
    record = launch()

    # When the gate looks
    outcome = gate(record, record.started_at)

    # Then it opens: pods that tolerate the group's taints can run there now
    assert (outcome.again, outcome.changes.get("outcome")) == (False, "node-ready")


def test_a_startup_taint_never_lifted_settles_the_launch_at_the_readiness_timeout_as_not_ready(
    server: KubeServer, gate: ReadinessGate
) -> None:
    # Given a launch whose node is Ready but keeps its CNI's startup taint (the agent crash-looping)
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
    set_taints(server, NODE, [{"key": "node.cilium.io/agent-not-ready", "effect": "NoExecute"}])
    record = launch()
    now = record.started_at

    # When the gate polls until its readiness timeout
    outcome = gate(record, now)
    while outcome.again:
        record = record.model_copy(update=dict(outcome.changes))
        now += timedelta(seconds=POLL)
        outcome = gate(record, now)

    # Then the launch is settled by the failure policy, as a node that is not ready
    assert (outcome.changes.get("outcome"), outcome.changes.get("result")) == (
        "node-not-ready",
        ActionResult.ABANDON,
    )
