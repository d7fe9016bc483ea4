"""A node name owner "stack-a" drained, registered again for an instance of owner "stack-a-b"'s group (a recycled
private IP), on the real Kubernetes adapter against the sandbox API server: stack-a's late cleanup, its late
forget of the instance and its sweep leave stack-b's claim of the name, its cordon and its budget slot alone."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.budget import BudgetLimits, DisruptionBudget, SlotDecision, SlotRequest
from nodecycle.domain.drain.forget import ForgetNode
from nodecycle.domain.model import Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import Quantity
from nodecycle.domain.ports.cluster import IN_PROGRESS_ANNOTATION, OWNER_ANNOTATION
from nodecycle.domain.sweep.annotations import LeftoverAnnotations
from nodecycle.domain.sweep.nodes import SweepNodes
from nodecycle.domain.sweep.sweep_time import SweepTime
from tests.integration.kube.cluster import drain_cluster, drain_server
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, SEED, draining
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.budget.fakes import FakeInventory, RecordingMetrics
from tests.unit.drain.test_drain_steps import (
    HOLDER_TTL,
    FakeSlots,
    NoDns,
    cleanup,
    cordon,
    policy,
    terminating,
    wakes_to_nowhere,
)

THEIRS = "stack-a-b"  # the other stack: an owner id of which ours ("stack-a") is a prefix
NEW = "i-0ffffffffffffffff"  # the instance of stack-a-b's group that got the name


def test_a_late_cleanup_forget_and_sweep_of_the_first_owner_leave_the_next_owners_claim_of_the_name() -> None:
    with drain_server(SEED) as server, drain_cluster(server) as cluster:
        # Given stack-a's drain of NODE (instance INSTANCE) claimed and finished, its cleanup and its state
        # change's forget not run yet (a stalled queue)
        finder = NodeFinder(cluster, NoDns())
        ours = draining(Step.CORDON)
        claimed = cordon(cluster, finder=finder)(ours, T0)
        ours = ours.model_copy(
            update={"step": Step.CLEANUP, "completed_at": T0 + timedelta(minutes=2), **claimed.changes}
        )
        # ...then INSTANCE gone, its node deleted, and the name registered again by stack-a-b's new instance,
        # which stack-a-b claims for its own drain (its slot held)
        server.remove_node(NODE)
        server.add_node(NODE, instance_id=NEW, zone="eu-west-1a")
        server.settle()
        theirs = terminating(
            Step.CORDON,
            id=f"{NEW}/terminate/theirs",
            instance_id=NEW,
            node=NODE,
            owner=THEIRS,
            token="theirs",
        )
        slots = FakeSlots(others={NODE: THEIRS})
        holder = slots.store.read()
        assert holder is not None
        (held,) = holder.holders
        held = held.model_copy(update={"record_id": theirs.id, "instance_id": NEW, "token": "theirs"})
        slots.store.text = holder.model_copy(update={"holders": (held,)}).to_json()
        slots.store.version += 1
        # (stack-a-b's cordon checks its slot in its own budget, over the same document)
        assert (
            cordon(cluster, finder=finder, slots=TheirBudget(slots))(
                theirs, T0 + timedelta(minutes=3)
            ).changes.get("outcome")
            is None
        )
        before = _annotations(cluster)
        assert before[OWNER_ANNOTATION] == THEIRS

        # When stack-a's late cleanup, its forget of INSTANCE (stopped outside the hooks before) and its sweep run
        later = T0 + timedelta(minutes=4)
        cleanup(cluster, slots)(ours, later)
        forget = ForgetNode(
            finder=finder,
            cluster=cluster,
            slots=slots,
            dispatcher=wakes_to_nowhere(),
            instances=NoDns(),
            policy=policy(),
        )
        forget(ours.model_copy(update={"step": Step.FORGET_NODE}), later)
        records = InMemoryRecords()
        records.create(ours.model_copy(update={"step": Step.DONE, "finished_at": later}))
        sweep = LeftoverAnnotations(
            owner=ours.owner, cluster=SweepNodes(cluster), records=records, metrics=FakeMetrics()
        )
        counts = sweep([], later, SweepTime(lambda: 300.0, timedelta(seconds=45)))

        # Then stack-a-b's node is as it claimed it: cordoned, its annotations; and its slot is held
        node = server.get_object("nodes", NODE)
        assert node is not None
        assert node["spec"].get("unschedulable") is True
        assert _annotations(cluster) == before
        assert counts == {"AnnotationsCleared": 0}
        doc = slots.store.read()
        assert doc is not None
        assert [(h.node, h.owner) for h in doc.holders] == [(NODE, THEIRS)]
        assert slots.forgotten == [INSTANCE]  # (stack-a's own entries of INSTANCE: none left to free)


def _annotations(cluster: KubeCluster) -> dict[str, str]:
    node = cluster.get_node(NODE)
    assert node is not None
    annotations = {OWNER_ANNOTATION: node.owner or "", IN_PROGRESS_ANNOTATION: str(node.in_progress)}
    return annotations


class TheirBudget:
    """stack-a-b's budget: the same document as the test's stack-a budget, asked as stack-a-b."""

    def __init__(self, slots: FakeSlots) -> None:
        self._budget = DisruptionBudget(
            store=slots.store,
            nodes=FakeInventory(),
            clock=slots.clock,
            metrics=RecordingMetrics(),
            limits=BudgetLimits(Quantity(value=1), None),
            holder_ttl=HOLDER_TTL,
            count_unavailable=False,
            owner=THEIRS,
        )

    def renew(self, request: SlotRequest) -> SlotDecision:
        return self._budget.renew(request)

    def acquire(self, request: SlotRequest) -> SlotDecision:
        return self._budget.acquire(request)
