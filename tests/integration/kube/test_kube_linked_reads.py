"""A terminate hook waiting in line, on the real Kubernetes adapter against the sandbox API server: it reads the
records of the disruptions of its instance again only when its node's version moved (see LINKED_NONE_AT), and a
Spot interruption's drain begun while it waits moves it (the cordon's PATCH), as does that drain's end (its
release): the hook waits for the drain, then goes on from it, as when it read those records at every ask."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.model import Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle_sandbox.kube import KubeServer
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import (
    FakeEvents,
    FakeSlots,
    NoDns,
    cordon,
    policy,
    spot,
    terminating,
    wakes_to_nowhere,
)
from tests.unit.drain.test_linked_reads_per_ask import CountedRecords, asked

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0123456789abcdef0"  # (the unit tests' instance: their Spot and terminate records are of it)
SEED = {
    "namespaces": ["shop"],
    "nodes": [{"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"}],
    "daemonSets": [{"name": "kube-proxy", "namespace": "kube-system"}],
}
RETRY = timedelta(seconds=30)  # BudgetRetrySeconds


def _asking_with_no_room(cluster: KubeCluster, records: CountedRecords) -> AcquireSlot:
    """The slot's ask on the real adapter, the budget full, the records counted as it reads them."""
    return AcquireSlot(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=FakeSlots(room=0),
        dispatcher=wakes_to_nowhere(),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=records,
    )


def test_a_spot_drain_begun_while_the_hook_waits_is_seen_through_the_nodes_version(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a terminate hook waiting in line (no room), its node's version unchanged since its first asks
    records = CountedRecords()
    step = _asking_with_no_room(cluster, records)
    record, now = terminating(Step.ACQUIRE_SLOT, id=f"{INSTANCE}/terminate/token", instance_id=INSTANCE), T0
    reads = []
    for _ in range(4):
        before = records.reads
        outcome = step(record, now)
        assert outcome.again, outcome
        reads.append(records.reads - before)
        record, now = asked(record, outcome.changes), now + RETRY
    assert reads == [1, 1, 0, 0]  # (the three records in one request)
    assert record.node == NODE

    # When the instance's Spot interruption cordons the node (the real Cordon step: one PATCH) and drains it
    interrupted = spot(Step.CORDON, instance_id=INSTANCE, node=NODE, zone="eu-west-1a")
    cordoned = cordon(cluster, finder=NodeFinder(cluster, NoDns()), slots=FakeSlots(holders={NODE}))(
        interrupted, now
    )
    assert cordoned.then is None, cordoned
    assert not cordoned.again, cordoned
    draining = asked(interrupted, {**cordoned.changes, "step": Step.EVICT})
    assert draining.drain_started_at is not None
    records.create(draining)
    waited = step(record, now)

    # Then the hook, its node's version moved, reads the records and waits for that drain
    assert (waited.again, waited.delay) == (True, 5)

    # When that drain is over and lets go of the node (still cordoned: its instance goes)
    node = cluster.get_node(NODE)
    assert node is not None
    cluster.release_node(node, released_for=draining.id)
    records.commit(draining.model_copy(update={"step": Step.DONE}), expected_seq=draining.seq)
    outcome = step(record, now + timedelta(seconds=5))

    # Then the hook goes on from it, asking for no slot
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drained-by:spot-interruption")
    after = server.get_object("nodes", NODE)
    assert after is not None
    assert after["spec"].get("unschedulable") is True


def test_a_spot_drain_of_a_deleted_node_is_waited_for_once_the_node_registers_again_unclaimed(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a terminate hook waiting in line, its node's version unchanged since its first asks
    records = CountedRecords()
    step = _asking_with_no_room(cluster, records)
    record, now = terminating(Step.ACQUIRE_SLOT, id=f"{INSTANCE}/terminate/token", instance_id=INSTANCE), T0
    for _ in range(3):
        outcome = step(record, now)
        record, now = asked(record, outcome.changes), now + RETRY
    before = server.get_object("nodes", NODE)
    assert before is not None

    # When the node object is deleted, the instance's Spot interruption drains the pods still bound to its name
    # (nothing to cordon: no PATCH of any node), and its kubelet registers the node again under the same name, not
    # claimed yet (a new object: its own uid, its version the API server's next)
    assert server.remove_node(NODE)
    draining = spot(Step.EVICT, instance_id=INSTANCE, node=NODE, zone="eu-west-1a", drain_started_at=now)
    records.create(draining)
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
    again = server.get_object("nodes", NODE)
    assert again is not None
    assert again["metadata"]["uid"] != before["metadata"]["uid"]
    outcome = step(record, now + timedelta(seconds=1))

    # Then the hook reads the records (the node it kept the version of is gone) and waits for that drain
    assert (outcome.again, outcome.delay) == (True, 5)
