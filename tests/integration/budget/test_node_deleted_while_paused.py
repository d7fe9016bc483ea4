"""A drain whose node object is deleted (``kubectl delete node``, its instance still running) evicts the pods
left bound to the node's name: they would otherwise be force-deleted all at once by the pod garbage collector,
whatever their PodDisruptionBudgets say. Those evictions are the drain's disruption as much as those on the node,
so they respect its budget slot as the node's polls do (invariant 1): renewed first; lost (its holder expired, a
ConfigMap created again) the drain pauses, evicting nothing, until the slot is back. They went ahead without a
look at the slot, also while the drain was paused for a lost slot, beside the node that took its room. On the
real Kubernetes adapter against the sandbox API server (its pods stay bound to the deleted node's name until
podgc's quarantine is over)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.cluster import PodInfo
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import drain_cluster, drain_server, evict_step
from tests.support.fakes import T0
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeSlots,
    policy,
    terminating,
)

SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.23", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 4}],
}
DEADLINE = T0 + timedelta(seconds=600)


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with drain_server(SEED, pod_gc_quarantine_seconds=600.0) as kube:  # the orphans stay for the whole test
        yield kube


@pytest.fixture
def cluster(server: KubeServer) -> Iterator[KubeCluster]:
    with drain_cluster(server) as adapter:
        yield adapter


def evict(cluster: KubeCluster, slots: FakeSlots) -> Evict:
    return evict_step(cluster, NODE, INSTANCE, slots=slots)


def web_pods(cluster: KubeCluster) -> list[PodInfo]:
    pods = [pod for pod in cluster.pods_on(NODE) if pod.controller_kind == "ReplicaSet"]
    assert pods, "the test needs web pods on the node"
    return pods


def left_alone(server: KubeServer, pods: list[PodInfo]) -> bool:
    """None of ``pods`` asked to leave: each still there, not being deleted."""
    found = [server.get_object("pods", pod.name, pod.namespace) for pod in pods]
    return all(pod is not None and not pod["metadata"].get("deletionTimestamp") for pod in found)


def draining(cluster: KubeCluster, **changes: object) -> LifecycleRecord:
    node = cluster.get_node(NODE)
    assert node is not None
    return terminating(
        Step.EVICT,
        node=NODE,
        node_uid=node.uid,
        drain_started_at=T0,
        drain_deadline=DEADLINE,
        extra={"polls": 1},
        **changes,
    )


@pytest.mark.parametrize("paused", [False, True], ids=["slot-lost-since", "paused-for-a-lost-slot"])
def test_a_drain_without_its_slot_does_not_evict_the_pods_left_on_its_deleted_node(
    cluster: KubeCluster, server: KubeServer, paused: bool
) -> None:
    # Given a drain whose budget slot went to another node (lost since its last poll, or already paused for it),
    # and its node object deleted while its instance runs: its pods stay bound to the node's name
    paused_at = T0 + timedelta(seconds=30) if paused else None
    record = draining(cluster, drain_paused_at=paused_at)
    pods = web_pods(cluster)
    server.remove_node(NODE)

    # When the drain polls
    now = T0 + timedelta(seconds=60)
    outcome = evict(cluster, FakeSlots(lost=True))(record, now)

    # Then it evicts none of them: it pauses (or stays paused, since when it first was) until its slot is back
    assert left_alone(server, pods)
    assert (outcome.then, outcome.again, outcome.delay) == (None, True, policy().budget_retry_seconds)
    assert outcome.changes.get("drain_paused_at", record.drain_paused_at) == (paused_at or now)


def test_a_paused_drain_whose_slot_is_back_evicts_the_pods_left_on_its_deleted_node_its_deadline_moved(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain paused for its lost slot 30 s in, and its node object deleted meanwhile
    record = draining(cluster, drain_paused_at=T0 + timedelta(seconds=30))
    pods = web_pods(cluster)
    server.remove_node(NODE)

    # When its slot is back at its next poll, 60 s in
    slots = FakeSlots(lost=True)
    slots.lost = False
    outcome = evict(cluster, slots)(record, T0 + timedelta(seconds=60))

    # Then it asks the pods to leave, and the pause is not drain time: its deadline moves by the 30 s paused
    assert not left_alone(server, pods)
    assert outcome.again
    assert outcome.changes["drain_paused_at"] is None
    assert outcome.changes["drain_deadline"] == DEADLINE + timedelta(seconds=30)
