"""The drain's search for the node of an instance whose name it does not know (EC2 does not answer its DNS name yet,
lagging or throttled: the node is then looked for by the instance id's name and a scan of every node), on the real
Kubernetes adapter against the sandbox API server whose nodes' watch cache lags (kube-apiserver serves a list with
``resourceVersion=0`` from its cache, which may be behind etcd by seconds under load: see watch_cache.py). An
instance terminated soon after its node registered (Auto Scaling scaling in, a launch abandoned) was listed by a
cache that did not have its node yet, taken for one with no node, and its action completed at once without a
drain: its pods ended by the termination, no eviction, no PodDisruptionBudget."""

from __future__ import annotations

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeSlots, acquire, terminating

SEED = drain_steps.SEED
NEW = "i-0a1b2c3d4e5f60301"  # an instance whose node has just registered
NEW_NODE = "ip-10-0-3-10.eu-west-1.compute.internal"


def test_a_node_registered_since_the_watch_cache_lags_is_found_and_drained(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the nodes' watch cache held behind, and then a new instance's node registering
    with server.lagging_watch_cache("nodes"):
        server.add_node(NEW_NODE, instance_id=NEW, zone="eu-west-1c")
        slots, metrics = FakeSlots(room=3), FakeMetrics()
        record = terminating(Step.ACQUIRE_SLOT, id=f"{NEW}/terminate/token", instance_id=NEW)

        # When the instance's terminate hook asks for a slot, its DNS name not known (EC2 not answering it yet)
        outcome = acquire(cluster, slots, metrics)(record, T0)

    # Then its node is found and takes a slot: the drain goes on
    assert outcome.changes.get("outcome") is None
    assert outcome.changes.get("node") == NEW_NODE
    assert NEW_NODE in slots.holders
    assert "NodesNotFound" not in metrics.counts
