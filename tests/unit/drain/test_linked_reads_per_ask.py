"""What a terminate hook waiting in the budget's line reads of the disruptions' records (a Spot interruption's, a
scheduled maintenance's, a rebalance's: LINKED_CAUSES) at its asks. Each is a strongly consistent read, and a
waiter asks every BudgetRetrySeconds: read at every ask, one GetItem each, they were three requests every 30 s, 360
an hour, for a drain that no disruption made; the three are read in one request (BatchGetItem). A drain for a disruption claims and cordons the node before its record says it
began (one PATCH, which moves the node's resourceVersion), so a node unclaimed and unchanged since the ask that
read them found nothing still has nothing to find: they are read again only when the node changed or is claimed.
What the hook does past such a drain (goes on from it, waits for it) is what it did when it read them at every
ask."""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import timedelta

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.cluster import NodeInfo
from tests.support.fakes import T0, InMemoryRecords
from tests.unit.drain.test_drain_steps import (
    INSTANCE,
    NODE,
    FakeCluster,
    acquire_after,
    node,
    spot,
    terminating,
)

RETRY = timedelta(seconds=30)  # BudgetRetrySeconds


class CountedRecords(InMemoryRecords):
    """The records, counting the requests that read them: one per record read alone (GetItem), one per records
    read together (BatchGetItem)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get(self, record_id: str) -> LifecycleRecord | None:
        self.reads += 1
        return super().get(record_id)

    def get_many(self, record_ids: Collection[str]) -> dict[str, LifecycleRecord]:
        self.reads += 1
        return super().get_many(record_ids)


def asked(record: LifecycleRecord, changes: object) -> LifecycleRecord:
    """``record`` as the engine commits a step's outcome (``changes``) for its next ask."""
    return record.model_copy(update=dict(changes))  # type: ignore[call-overload]


def claimed_for_the_spot_interruption(version: str) -> NodeInfo:
    """NODE as the Spot interruption's cordon leaves it: claimed by its lifecycle, cordoned, at ``version``."""
    progress = json.dumps({"instance": INSTANCE, "transition": "spot-interruption", "token": "token"})
    return node(owner="stack-a", in_progress=progress, unschedulable=True, resource_version=version)


def test_a_waiter_reads_the_disruptions_records_again_only_when_its_node_changed() -> None:
    # Given a terminate hook waiting in line for a slot, no disruption of its instance on the record
    records, cluster = CountedRecords(), FakeCluster(nodes={NODE: node()})
    step = acquire_after(records, cluster)
    record, now = terminating(Step.ACQUIRE_SLOT), T0

    # When it asks twelve times, its node unchanged
    reads = []
    for _ in range(12):
        before = records.reads
        outcome = step(record, now)
        assert outcome.again
        reads.append(records.reads - before)
        record, now = asked(record, outcome.changes), now + RETRY

    # Then it read the three records, in one request, at its first two asks only (the first finds the node: what
    # its version is after is not known to be what it was before the reads)
    assert reads == [1, 1] + [0] * 10

    # When the kubelet posts the node's status (its version moves: every nodeStatusReportFrequency, 5 minutes)
    cluster.nodes[NODE] = node(resource_version="8")
    before = records.reads
    outcome = step(record, now)

    # Then it reads them again at that ask, then no more while the node stays so
    assert records.reads - before == 1
    record, now = asked(record, outcome.changes), now + RETRY
    before = records.reads
    assert step(record, now).again
    assert records.reads == before


def test_a_spot_drain_begun_while_the_hook_waits_in_line_is_waited_for_then_gone_on_from() -> None:
    # Given a terminate hook waiting in line, its node unchanged since it last read the records
    records, cluster = CountedRecords(), FakeCluster(nodes={NODE: node()})
    step = acquire_after(records, cluster)
    record, now = terminating(Step.ACQUIRE_SLOT), T0
    for _ in range(3):
        outcome = step(record, now)
        record, now = asked(record, outcome.changes), now + RETRY

    # When a Spot interruption of its instance claims and cordons the node, and drains it
    cluster.nodes[NODE] = claimed_for_the_spot_interruption("8")
    draining = spot(Step.EVICT, node=NODE, zone="eu-west-1a", drain_started_at=now - timedelta(seconds=5))
    records.create(draining)
    waiting = [step(record, now), step(record, now + timedelta(seconds=5))]

    # Then the hook waits for that drain, reading its record at each poll (the node, claimed, stays unchanged)
    assert [(outcome.again, outcome.delay) for outcome in waiting] == [(True, 5), (True, 5)]

    # When that drain is over, and its cleanup lets go of the node (cordoned still)
    records.commit(draining.model_copy(update={"step": Step.DONE}), expected_seq=draining.seq)
    cluster.nodes[NODE] = node(unschedulable=True, released_for=draining.id, resource_version="9")
    outcome = step(record, now + timedelta(seconds=10))

    # Then the hook goes on from that drain, asking for no slot
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drained-by:spot-interruption")


def test_a_drain_over_is_gone_on_from_when_the_node_cannot_be_read() -> None:
    # Given a terminate hook waiting in line, and a Spot interruption's drain of its node, over
    records, cluster = CountedRecords(), FakeCluster(nodes={NODE: node()})
    step = acquire_after(records, cluster)
    record = terminating(Step.ACQUIRE_SLOT)
    for second in (0, 30):
        outcome = step(record, T0 + timedelta(seconds=second))
        record = asked(record, outcome.changes)
    records.create(spot(Step.DONE, node=NODE, zone="eu-west-1a", drain_started_at=T0, outcome="drained"))

    # When the API server fails the read of the node at the hook's next ask
    failing = FailingNodeReads(nodes=dict(cluster.nodes))
    outcome = acquire_after(records, failing)(record, T0 + timedelta(minutes=2))

    # Then the hook goes on from that drain all the same, as when it read the records before the node
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drained-by:spot-interruption")


class FailingNodeReads(FakeCluster):
    """An API server that fails every read of a node (a 5xx, an etcd timing out)."""

    def node_version(self, name: str) -> tuple[str | None, str] | None:
        raise TransientError("etcdserver: request timed out")

    def get_node(self, name: str) -> NodeInfo | None:
        raise TransientError("etcdserver: request timed out")


def test_a_drain_over_whose_pods_could_not_be_listed_is_gone_on_from_at_a_later_ask() -> None:
    # Given a terminate hook waiting in line, and a Spot interruption's drain of its node, over: its cleanup let go
    # of the node (its version moved), which nothing writes after (the instance's kubelet is gone with it)
    records, cluster = CountedRecords(), FakeCluster(nodes={NODE: node()})
    step = acquire_after(records, cluster)
    record, now = terminating(Step.ACQUIRE_SLOT), T0
    for _ in range(3):
        outcome = step(record, now)
        record, now = asked(record, outcome.changes), now + RETRY
    drained = spot(Step.DONE, node=NODE, zone="eu-west-1a", drain_started_at=now - RETRY, outcome="drained")
    records.create(drained)
    cluster.nodes[NODE] = node(unschedulable=True, released_for=drained.id, resource_version="9")

    # When the list of the node's pods fails at the ask that reads that drain's record (a 5xx, an etcd timing out):
    # whether pods came back cannot be told, and the hook stays in line
    cluster.pods_failing = "etcdserver: request timed out"
    outcome = step(record, now)
    assert outcome.again
    record, now = asked(record, outcome.changes), now + RETRY

    # Then at its next ask, the list answering and the node unchanged, the hook goes on from that drain, as when
    # it read the records at every ask: a failed list decided nothing that the node's version could vouch for
    cluster.pods_failing = None
    outcome = step(record, now)
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drained-by:spot-interruption")
