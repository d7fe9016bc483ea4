"""The drain's first steps on the real Kubernetes adapter when the instance's node object is deleted before its
cordon (kubectl delete node, a tool that deletes Node objects) while the instance runs. The API server keeps the
pods bound to the node's name, running (their kubelet serves them by that name, and does not register its node
again while it runs: kubernetes/kubernetes#71398), until the pod garbage collector's quarantine is over (40 s), then
force-deletes them all at once, PodDisruptionBudgets or not (pkg/controller/podgc, gcOrphaned). Completing the
action before then terminates the instance under them."""

from __future__ import annotations

from datetime import timedelta

from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.ports.cluster import Claim, NodeInfo
from nodecycle.domain.ports.instances import Instances
from nodecycle_sandbox.kube import SHUTDOWN_ANNOTATION, KubeServer
from tests.integration.kube.cluster import evict_step
from tests.integration.kube.test_kube_drain_steps import (
    DEADLINE,
    INSTANCE,
    NODE,
    draining,
    on_its_way_out,
    web_pods,
)
from tests.integration.kube.test_kube_drain_steps import SEED as DRAIN_STEPS_SEED
from tests.support.fakes import T0, FakeMetrics, InMemoryRecords
from tests.unit.drain.test_drain_steps import (
    FakeEvents,
    FakeSlots,
    NoDns,
    cordon,
    policy,
    terminating,
    wakes_to_nowhere,
)

QUARANTINE = 600.0  # longer than any test: the deleted node's pods stay bound to its name throughout
SEED = DRAIN_STEPS_SEED
SERVER_OPTIONS = {"pod_gc_quarantine_seconds": QUARANTINE}
ZONE = "eu-west-1a"


class Dns(NoDns):
    """EC2 as it answers for the instance: its private DNS name is its node's name (EKS's default)."""

    def private_dns_name(self, instance_id: str) -> str | None:
        return NODE if instance_id == INSTANCE else None


def first_ask() -> LifecycleRecord:
    """The terminate lifecycle of the instance at its first ask: its node not looked for yet."""
    return terminating(Step.ACQUIRE_SLOT, id=f"{INSTANCE}/terminate/token", instance_id=INSTANCE)


def ask(cluster: KubeCluster, slots: FakeSlots, instances: Instances | None = None) -> AcquireSlot:
    return AcquireSlot(
        finder=NodeFinder(cluster, instances or NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=InMemoryRecords(),
    )


def test_a_waiter_whose_node_object_is_deleted_under_running_pods_takes_its_slot_rather_than_completing(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a terminating instance waiting in line for its node's slot, and its node object deleted meanwhile while
    # the instance runs: its pods stay bound to the node's name, running
    node = cluster.get_node(NODE)
    assert node is not None
    pods = web_pods(cluster)
    record = draining(Step.ACQUIRE_SLOT, node_uid=node.uid, zone=ZONE, slot_waiting_since=T0)
    server.remove_node(NODE)
    slots = FakeSlots()

    # When it asks again, a slot free
    outcome = ask(cluster, slots)(record, T0 + timedelta(seconds=30))

    # Then it takes the slot for the node's name and goes on to drain those pods, rather than settling the action
    # (completed, the instance terminated under them)
    assert (outcome.then, outcome.again) == (None, False)
    assert outcome.changes["node"] == NODE
    assert slots.holders == {NODE}
    assert not any(on_its_way_out(server, pod) for pod in pods)


def test_a_first_ask_for_a_node_deleted_under_running_pods_finds_them_by_the_instances_dns_name(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a terminate action whose instance's node object was deleted before its first ask (kubectl delete node,
    # then the instance terminated), its pods still bound to the node's name, the instance's private DNS name
    server.remove_node(NODE)
    assert cluster.pods_on(NODE)
    slots = FakeSlots()

    # When it asks for a slot
    outcome = ask(cluster, slots, Dns())(first_ask(), T0)

    # Then its drain takes a slot for that name (its zone unknown: counted against every zone), not node-not-found
    assert (outcome.then, outcome.again) == (None, False), outcome
    assert (outcome.changes["node"], outcome.changes["zone"]) == (NODE, None)
    assert slots.holders == {NODE}


def test_a_node_gone_with_no_pod_bound_to_its_name_is_still_not_found(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the instance's node object deleted and its pods gone with it (the garbage collector's quarantine over)
    server.remove_node(NODE)
    server.pod_gc_quarantine_seconds = 0
    server.settle()
    assert [pod for pod in cluster.pods_on(NODE) if pod.controller_kind == "ReplicaSet"] == []
    slots = FakeSlots()

    # When its terminate action asks for a slot, Then nothing is left to drain: settled at once, no slot taken
    outcome = ask(cluster, slots, Dns())(first_ask(), T0)
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "node-not-found")
    assert slots.holders == set()


def cordoned_after_deletion(cluster: KubeCluster, server: KubeServer, slots: FakeSlots) -> LifecycleRecord:
    """The drain at its eviction after its cordon found its node object deleted, pods still bound to its name."""
    node = cluster.get_node(NODE)
    assert node is not None
    record = draining(Step.CORDON, node_uid=node.uid, zone=ZONE)
    server.remove_node(NODE)
    outcome = cordon(cluster, slots=slots)(record, T0)
    assert (outcome.then, outcome.again) == (None, False), outcome
    return record.model_copy(update={"step": Step.EVICT, **outcome.changes})


def test_a_node_object_deleted_between_the_slot_and_the_cordon_has_its_pods_evicted_before_the_action_ends(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain granted its slot, and its node object deleted before its cordon while its instance runs
    pods = web_pods(cluster)
    slots = FakeSlots(holders=[NODE])

    # When the cordon comes, Then it goes on to the eviction rather than settling the action: nothing to cordon,
    # the drain's time running from now
    record = cordoned_after_deletion(cluster, server, slots)
    assert (record.drain_started_at, record.drain_deadline) == (T0, DEADLINE)

    # When the eviction polls, Then the pods bound to the name are asked to leave, with the slot held
    outcome = evict_step(cluster, NODE, INSTANCE, slots=slots)(record, T0)
    assert all(on_its_way_out(server, pod) for pod in pods)
    assert outcome.again
    assert slots.holders == {NODE}


def test_a_node_registered_again_after_its_deletion_spared_the_cordon_is_claimed_then(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose cordon found its node object deleted and went on to the pods bound to its name; then the
    # instance's kubelet restarted and registered its node again: a new uid, no cordon, no claim
    slots = FakeSlots(holders=[NODE])
    record = cordoned_after_deletion(cluster, server, slots)
    server.add_node(NODE, instance_id=INSTANCE, zone=ZONE)
    server.settle()

    # When the eviction polls, Then it sends the drain to its cordon
    polled = evict_step(cluster, NODE, INSTANCE, slots=slots)(record, T0 + timedelta(seconds=5))
    assert polled.then is Step.CORDON

    # And the cordon claims the node, keeping the drain's time
    record = record.model_copy(update={"step": Step.CORDON, **polled.changes})
    claimed = cordon(cluster, slots=slots)(record, T0 + timedelta(seconds=5))
    assert (claimed.then, claimed.again) == (None, False), claimed
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert node["spec"].get("unschedulable") is True
    assert claimed.changes["drain_deadline"] == DEADLINE
    assert "node_deleted_at_cordon" not in claimed.changes["extra"]


class DeletedBeforeTheClaim(KubeCluster):
    """The real adapter, the node object deleted (kubectl delete node, its instance running) between the cordon's
    read of the node and its claim: the claim's PATCH answers 404."""

    def __init__(self, server: KubeServer) -> None:
        super().__init__(
            EksCluster("sandbox").api_client
        )  # (as drain_cluster builds it, within its EKS answers)
        self._server = server

    def claim_node(
        self, node: NodeInfo, *, owner: str, in_progress: str, cordon: bool, exclude_from_lb: bool
    ) -> Claim:
        self._server.remove_node(node.name)
        return super().claim_node(
            node, owner=owner, in_progress=in_progress, cordon=cordon, exclude_from_lb=exclude_from_lb
        )


def test_a_node_object_deleted_between_the_cordons_read_and_its_claim_has_its_pods_evicted_not_settled(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain granted its slot, and its node object deleted between the cordon's read of it and its claim
    # (the PATCH answers 404), its instance running: its pods stay bound to the node's name
    node = cluster.get_node(NODE)
    assert node is not None
    pods = web_pods(cluster)
    slots = FakeSlots(holders=[NODE])
    record = draining(Step.CORDON, node_uid=node.uid, zone=ZONE)

    # When the cordon comes
    outcome = cordon(DeletedBeforeTheClaim(server), slots=slots)(record, T0)

    # Then it goes on to the eviction, nothing cordoned, rather than settling the action (completed, the instance
    # terminated under those pods)
    assert (outcome.then, outcome.again) == (None, False), outcome
    assert (outcome.changes["drain_started_at"], outcome.changes["drain_deadline"]) == (T0, DEADLINE)
    assert pods_bound(server)
    evicting = record.model_copy(update={"step": Step.EVICT, **outcome.changes})
    polled = evict_step(cluster, NODE, INSTANCE, slots=slots)(evicting, T0)
    assert all(on_its_way_out(server, pod) for pod in pods)
    assert polled.again


def pods_bound(server: KubeServer) -> bool:
    return any(pod["spec"].get("nodeName") == NODE for pod in server.objects("pods", "shop"))


def test_a_first_ask_for_a_deleted_node_whose_last_pods_shortened_deletion_is_past_its_deadline_takes_its_slot(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a terminate action whose instance's node object was deleted while the instance runs, the last of its pods
    # bound to the node's name being deleted by someone else (a rollout, with a grace of 5 minutes), the others stopped
    slow = web_pods(cluster)[0]
    CoreV1Api(server.api_client()).patch_namespaced_pod(
        slow.name, slow.namespace, {"metadata": {"annotations": {SHUTDOWN_ANNOTATION: "86400"}}}
    )
    cluster.delete_pod(slow, 300)
    server.remove_node(NODE)
    for pod in web_pods(cluster):
        if pod.uid != slow.uid:
            cluster.delete_pod(pod, 0)

    # and that deletion shortened to 20 s by someone else (kubectl delete --grace-period=20): the API server counts its
    # new deadline from the first delete (rest.BeforeDelete), the kubelet kills the pod with the shorter grace from
    # then. The first ask looks a second past that deadline, as it would had the shortening come 21 s after the first
    # delete: it cannot tell when it came
    cluster.delete_pod(slow, 20)
    shortened = next(p for p in cluster.pods_on(NODE) if p.uid == slow.uid)
    assert shortened.deletion_at is not None
    assert shortened.deletion_grace == 20
    slots = FakeSlots()

    # When it asks for a slot
    outcome = ask(cluster, slots, Dns())(first_ask(), shortened.deletion_at + timedelta(seconds=1))

    # Then its drain takes a slot for the node's name, to wait for that pod, rather than settling the action
    # (node-not-found: completed, the instance terminated while the pod's kubelet still stops it)
    assert (outcome.then, outcome.again) == (None, False), outcome
    assert outcome.changes["node"] == NODE
    assert slots.holders == {NODE}
