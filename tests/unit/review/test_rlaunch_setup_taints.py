"""Which taints of a Ready node hold the launch readiness gate: those a controller or an agent lifts once the node
is set up, not those the node keeps for good; and a node held so whose instance goes down ends the gate as down."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.domain.launch import SCAN_EVERY
from nodecycle.domain.policy import ActionResult
from tests.support.fakes import T0
from tests.support.readiness_gates import Dns, GoingDown, gate_in, gate_on
from tests.unit.drain.test_drain_steps import NODE, FakeCluster, launching, node, readiness
from tests.unit.foundation.test_engine import World


@pytest.mark.parametrize(
    ("taints", "held"),
    [
        # the node lifecycle controller's, lifted some seconds after it sees the kubelet's Ready (or its return)
        (("node.kubernetes.io/not-ready", "node.kubernetes.io/not-ready"), True),
        (("node.kubernetes.io/unreachable",), True),
        # the cloud controller manager's: not initialized yet, or back from a Stopped warm pool
        (("node.cloudprovider.kubernetes.io/uninitialized",), True),
        (("node.cloudprovider.kubernetes.io/shutdown",), True),
        # agents' startup taints, by their shared names: Istio's CNI, Cilium, the EFS CSI driver
        (("cni.istio.io/not-ready",), True),
        (("dedicated", "node.cilium.io/agent-not-ready"), True),
        (("efs.csi.aws.com/agent-not-ready",), True),
        # kept for good: a dedicated group's, a cordon's (the cleanup the gate wakes lifts that one)
        (("dedicated", "nvidia.com/gpu"), False),
        (("node.kubernetes.io/unschedulable",), False),
        # a name that only contains the words is someone's own taint
        (("example.com/not-ready-for-batch",), False),
    ],
)
def test_a_ready_node_holds_the_gate_only_under_a_taint_lifted_once_it_is_set_up(
    taints: tuple[str, ...], held: bool
) -> None:
    # Given a launch whose node is Ready, its kubelet running, under these NoSchedule or NoExecute taints
    cluster = FakeCluster(nodes={NODE: node(taints=taints)})
    gate = gate_on(cluster, Dns(), readiness())

    # When the gate looks
    outcome = gate(launching(), T0)

    # Then it waits only for a node that is still being set up
    assert outcome.again is held, outcome.changes


def test_a_ready_node_held_by_a_startup_taint_whose_instance_goes_down_ends_the_gate_as_down() -> None:
    # Given a launch whose node says Ready but keeps its CNI's startup taint, and whose instance is terminated
    # meanwhile (a scale-in racing the launch)
    world = World()
    cluster = FakeCluster(nodes={NODE: node(taints=("node.cilium.io/agent-not-ready",))})
    ec2 = GoingDown(world, at=T0, state="terminated")
    gate = gate_in(world, cluster, ec2, readiness(readiness_timeout_seconds="600", drain_poll_seconds="10"))

    # When the gate polls
    record, now = launching(), T0
    outcome = gate(record, now)
    for _ in range(SCAN_EVERY):
        if not outcome.again:
            break
        record = record.model_copy(update=dict(outcome.changes))
        now += timedelta(seconds=10)
        outcome = gate(record, now)

    # Then EC2 is asked, as of any node not ready for the gate, and the gate ends as the instance's going down,
    # not at its readiness timeout
    assert (outcome.again, outcome.changes.get("outcome"), outcome.changes.get("result")) == (
        False,
        "instance-down",
        ActionResult.ABANDON,
    )
    assert world.metrics.counts.get("ReadinessTimeouts", 0) == 0
