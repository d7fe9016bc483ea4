"""What the drain's polls read of their node, on the real Kubernetes adapter against the sandbox API server: the
whole node once, then its metadata only (a PartialObjectMetadata GET) while its resourceVersion says it has not
changed: a real node's spec and status (its images above all) are most of its bytes, and a drain polls every
few seconds. A change (someone uncordons it) is read whole at the next poll, and answered as before."""

from __future__ import annotations

from datetime import timedelta

from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import evict_step
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeAutoscaling
from tests.unit.drain.test_drain_steps import FakeSlots, NoDns, acquire, cleanup, cordon

SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    # pods that take an hour to stop: the drain polls on
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 4, "shutdownSeconds": 3600}],
}


def evict(cluster: KubeCluster) -> Evict:
    return evict_step(cluster, NODE, INSTANCE)


def claimed(cluster: KubeCluster, server: KubeServer) -> LifecycleRecord:
    """The drain's record once its cordon claimed the node, and the controllers answered the cordon (the node
    lifecycle controller taints a cordoned node unschedulable, a write of its own moments after the cordon: a poll
    that read the node before it reads it whole again after it, as on a cluster)."""
    record = draining(Step.CORDON, node_uid=cluster.get_node(NODE).uid)  # type: ignore[union-attr]
    claim = cordon(cluster, finder=NodeFinder(cluster, NoDns()))(record, T0)
    server.settle()
    return record.model_copy(update={"step": Step.EVICT, **claim.changes})


def node_bytes(server: KubeServer) -> int:
    return server.bytes_sent().get(("get", "nodes"), 0)


def test_later_polls_of_an_unchanged_node_read_a_fraction_of_its_bytes(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain that has claimed its node
    record = claimed(cluster, server)
    step = evict(cluster)

    # When it polls three times, the node unchanged
    read = []
    for second in (0, 1, 3):
        server.reset_counters()
        outcome = step(record, T0 + timedelta(seconds=second))
        assert outcome.again
        record = record.model_copy(update=dict(outcome.changes))
        read.append((server.counters().get(("get", "nodes"), 0), node_bytes(server)))

    # Then each reads the node once; the later ones a fraction of what the first read
    assert [requests for requests, _ in read] == [1, 1, 1]
    whole = read[0][1]
    assert all(size * 2 < whole for _, size in read[1:]), read


def test_later_polls_list_a_fraction_of_the_pods_bytes(cluster: KubeCluster, server: KubeServer) -> None:
    # Given a drain that has claimed its node
    record = claimed(cluster, server)
    step = evict(cluster)

    # When it polls three times, its pods still there
    listed = []
    for second in (0, 1, 3):
        server.reset_counters()
        record = record.model_copy(update=dict(step(record, T0 + timedelta(seconds=second)).changes))
        listed.append(
            (server.counters().get(("list", "pods"), 0), server.bytes_sent().get(("list", "pods"), 0))
        )

    # Then each lists them once; the later ones their metadata only, less than what the first listed (the
    # sandbox's pods are small: a real pod's spec and status are most of its bytes)
    assert [requests for requests, _ in listed] == [1, 1, 1]
    assert all(size * 10 < listed[0][1] * 9 for _, size in listed[1:]), listed


def test_a_node_uncordoned_between_two_polls_is_read_whole_and_claimed_again(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain that has polled twice (the second read the node's metadata only)
    record = claimed(cluster, server)
    step = evict(cluster)
    for second in (0, 1):
        record = record.model_copy(update=dict(step(record, T0 + timedelta(seconds=second)).changes))

    # When someone uncordons the node, and the drain polls
    with server.api_client() as admin:
        CoreV1Api(admin).patch_node(NODE, {"spec": {"unschedulable": False}})
    outcome = step(record, T0 + timedelta(seconds=3))

    # Then it claims it again, as it always did
    assert outcome.then is Step.CORDON


def whole_node_bytes(cluster: KubeCluster, server: KubeServer) -> int:
    """What one read of the whole node sends."""
    server.reset_counters()
    cluster.get_node(NODE)
    return node_bytes(server)


def test_the_cordon_after_the_slots_ask_reads_the_nodes_metadata_only(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a lifecycle whose ask for a slot was granted (it read the node whole)
    record = draining(Step.ACQUIRE_SLOT)
    asked = acquire(cluster, FakeSlots())(record, T0)
    assert (asked.then, asked.again) == (None, False)  # granted: on to the cordon
    record = record.model_copy(update={"step": Step.CORDON, **asked.changes})
    whole = whole_node_bytes(cluster, server)

    # When the cordon runs, the node unchanged since the ask
    server.reset_counters()
    claim = cordon(cluster, finder=NodeFinder(cluster, NoDns()))(record, T0)

    # Then it read the node once, its metadata only, and cordoned it as before
    assert server.counters().get(("get", "nodes"), 0) == 1
    assert node_bytes(server) * 2 < whole
    assert claim.changes["drain_started_at"] == T0
    assert cluster.get_node(NODE).unschedulable  # type: ignore[union-attr]

    # And the eviction's first poll reads the node once, whole: the cordon changed it
    record = record.model_copy(update={"step": Step.EVICT, **claim.changes})
    server.reset_counters()
    assert evict(cluster)(record, T0).again
    assert server.counters().get(("get", "nodes"), 0) == 1


def test_a_waiters_asks_after_the_first_read_the_nodes_metadata_only(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a lifecycle waiting for a slot, its first ask made (the node read whole)
    record = draining(Step.ACQUIRE_SLOT)
    step = acquire(cluster, FakeSlots(room=0))
    first = step(record, T0)
    assert first.again
    record = record.model_copy(update=dict(first.changes))
    whole = whole_node_bytes(cluster, server)

    # When it asks again, the node unchanged
    server.reset_counters()
    assert step(record, T0 + timedelta(seconds=30)).again

    # Then it read the node's metadata only
    assert server.counters().get(("get", "nodes"), 0) == 1
    assert node_bytes(server) * 2 < whole


def test_the_cleanup_after_the_drain_reads_the_nodes_metadata_only(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain that has claimed its node and polled it (read whole), and its action completed
    record = claimed(cluster, server)
    polled = evict(cluster)(record, T0)
    record = record.model_copy(update={**polled.changes, "step": Step.CLEANUP, "completed_at": T0})
    whole = whole_node_bytes(cluster, server)

    # When its cleanup runs, the node unchanged since the poll
    server.reset_counters()
    cleanup(cluster, FakeSlots(holders={NODE}))(record, T0 + timedelta(seconds=1))

    # Then it read the node's metadata only, and cleared the drain's annotations as before
    assert server.counters().get(("get", "nodes"), 0) == 1
    assert node_bytes(server) * 2 < whole
    released = cluster.get_node(NODE)
    assert released is not None
    assert (released.owner, released.in_progress) == (None, None)


def test_the_looks_of_a_warm_pool_watch_read_the_nodes_metadata_only(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drained node kept cordoned for an instance waiting in a running warm pool: its cleanup watches it
    record = claimed(cluster, server).model_copy(
        update={"step": Step.CLEANUP, "completed_at": T0, "destination": "WarmPool"}
    )
    step = cleanup(cluster, FakeSlots(holders={NODE}), FakeAutoscaling(states={INSTANCE: "Warmed:Running"}))
    first = step(record, T0)
    assert first.again
    watching = record.model_copy(update=dict(first.changes))
    whole = whole_node_bytes(cluster, server)

    # When it looks again, the node unchanged
    server.reset_counters()
    assert step(watching, T0 + timedelta(seconds=10)).again

    # Then it read the node's metadata only, and the node stays cordoned
    assert server.counters().get(("get", "nodes"), 0) == 1
    assert node_bytes(server) * 2 < whole
    assert cluster.get_node(NODE).unschedulable  # type: ignore[union-attr]
