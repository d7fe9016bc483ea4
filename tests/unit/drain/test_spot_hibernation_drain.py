"""The drain of a Spot interruption that hibernates its instance: EC2 gives no two minutes then ("If you specify
hibernation as the interruption behavior, you receive an interruption notice, but you do not receive a two-minute
warning because the hibernation process begins immediately": EC2 User Guide, Spot Instance interruption notices).
The drain asks EC2 whether the instance is down at its polls, and ends as soon as it is, rather than evicting from
a node already going down until its timeout. A warned interruption's drain on a Ready node asks EC2 nothing."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import timedelta

import pytest

from nodecycle.domain.model import SPOT_ACTION, LifecycleRecord, Step
from tests.support.fakes import FakeMetrics
from tests.unit.drain.builders import pod
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    T0,
    FakeCluster,
    FakeSlots,
    NoDns,
    draining,
    evict,
    node,
    spot,
)


@dataclass
class CountingEc2(NoDns):
    """EC2 that counts the reads of its instances' states."""

    reads: int = 0

    def states(self, instance_ids: Collection[str]) -> dict[str, str]:
        self.reads += 1
        return super().states(instance_ids)


def interrupted(action: str) -> LifecycleRecord:
    """The drain of a Spot interruption whose warning said ``action``, its node cordoned at T0."""
    strikes = T0 + timedelta(minutes=2)
    drain = {"node": NODE, "drain_started_at": T0, "drain_deadline": strikes - timedelta(seconds=10)}
    return spot(Step.EVICT, **drain, extra={SPOT_ACTION: action})


def its_slot() -> FakeSlots:
    return FakeSlots(holders={NODE}, held_for={NODE: f"{INSTANCE}/spot-interruption"})


def test_a_spot_hibernation_drain_settles_once_ec2_shows_the_instance_down_its_node_still_ready() -> None:
    # Given the drain of a Spot interruption that hibernates its instance, its slot its own, its node still Ready
    # (the node controller marks it NotReady only after its grace, 40 s on EKS), EC2 showing the instance stopping
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")], blocked={"web-1"})
    metrics = FakeMetrics()
    step = evict(cluster, its_slot(), metrics, ec2=NoDns(known={INSTANCE: "stopping"}))

    # When it polls
    outcome = step(interrupted("hibernate"), T0 + timedelta(seconds=2))

    # Then it settles at once, asking no pod to go from an instance already going down
    assert (outcome.then, outcome.changes["outcome"]) == (Step.CLEANUP, "instance-down")
    assert cluster.evictions == []
    assert metrics.counts.get("EvictionsBlockedByPdb", 0) == 0


def test_the_drain_of_a_spot_hibernation_goes_on_while_ec2_shows_the_instance_running() -> None:
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    outcome = evict(cluster, its_slot(), ec2=NoDns(known={INSTANCE: "running"}))(interrupted("hibernate"), T0)
    assert outcome.again
    assert [name for name, _ in cluster.evictions] == ["web-1"]


@pytest.mark.parametrize("action", ["terminate", "stop"])
def test_the_drain_of_a_warned_spot_interruption_on_a_ready_node_asks_ec2_nothing(action: str) -> None:
    # Given the drain of a Spot interruption EC2 gives its two minutes for, its node Ready
    cluster = FakeCluster(nodes={NODE: node()}, pods=[pod("web-1")])
    ec2 = CountingEc2(known={INSTANCE: "running"})
    step = evict(cluster, its_slot(), ec2=ec2)

    # When it polls, Then it evicts without a read of EC2's (a call per poll would add to every drain)
    outcome = step(interrupted(action), T0 + timedelta(seconds=2))
    assert outcome.again
    assert [name for name, _ in cluster.evictions] == ["web-1"]
    assert ec2.reads == 0


def test_a_spot_stop_drain_whose_node_kubelet_is_gone_settles_once_ec2_shows_its_instance_down() -> None:
    # Given the drain of a Spot interruption (stop), its node's kubelet gone (Ready Unknown), its slot its own, EC2
    # showing the instance stopped
    lost = node(ready=False, kubelet_lost=True)
    cluster = FakeCluster(nodes={NODE: lost}, pods=[pod("web-1")], blocked={"web-1"})
    step = evict(cluster, its_slot(), ec2=NoDns(known={INSTANCE: "stopped"}))

    # When it polls, Then it settles at once
    outcome = step(interrupted("stop"), T0 + timedelta(seconds=2))
    assert outcome.changes["outcome"] == "instance-down"
    assert cluster.evictions == []


def test_a_terminate_hook_drain_whose_node_kubelet_is_gone_asks_ec2_nothing() -> None:
    # Given a terminate hook's drain (Auto Scaling holds its instance running), its node's kubelet gone
    lost = node(ready=False, kubelet_lost=True)
    cluster = FakeCluster(nodes={NODE: lost}, pods=[pod("web-1")])
    ec2 = CountingEc2(known={INSTANCE: "running"})

    # When it polls, Then it goes on without a read of EC2's
    outcome = evict(cluster, ec2=ec2)(draining(), T0)
    assert outcome.again
    assert ec2.reads == 0
