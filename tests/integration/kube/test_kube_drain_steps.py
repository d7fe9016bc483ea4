"""The drain's steps on the real Kubernetes adapter, against the sandbox API server: the answers that the unit
tests' fake cluster can only imitate come here as an API server gives them (an admission webhook's denial of
one pod, a 503 for one pod's eviction, a node name another instance's node took, a node whose annotations a
stop of its instance cleared before the drain's cleanup)."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes.client import (
    CoreV1Api,
    V1Container,
    V1EmptyDirVolumeSource,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1Volume,
)

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.acquire import AcquireSlot
from nodecycle.domain.drain.cleanup import Cleanup
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.drain.forget import ForgetNode
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.ports.cluster import EXCLUDE_LB_LABEL, PodInfo, Refused
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.admission import Denial
from nodecycle_sandbox.kube.meta import SHUTDOWN_ANNOTATION
from tests.integration.kube.cluster import evict_step
from tests.support.fakes import T0, FakeAutoscaling, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.drain.test_drain_steps import (
    Ec2Maintenance,
    FakeEvents,
    FakeSlots,
    NoDns,
    cleanup,
    cordon,
    policy,
    spot,
    terminating,
    wakes_to_nowhere,
)
from tests.unit.foundation.test_engine import World

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "daemonSets": [{"name": "kube-proxy", "namespace": "kube-system"}],
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 4}],
}
WEBHOOK = "guard.example.com"
DEADLINE = T0 + timedelta(seconds=600)  # the drain timeout of the unit tests' policy


def web_pods(cluster: KubeCluster) -> list[PodInfo]:
    """The node's web pods, in the order the drain asks them to leave."""
    pods = [pod for pod in cluster.pods_on(NODE) if pod.controller_kind == "ReplicaSet"]
    assert len(pods) >= 2, "the test needs two web pods on the node"
    return pods


def draining(step: Step = Step.EVICT, **changes: object) -> LifecycleRecord:
    """The terminate lifecycle of the node's instance at ``step``; from the eviction on, cordoned at T0."""
    drain = {"drain_started_at": T0, "drain_deadline": DEADLINE} if step is Step.EVICT else {}
    identity = {"id": f"{INSTANCE}/terminate/token", "instance_id": INSTANCE, "node": NODE}
    return terminating(step, **identity, **drain, **changes)


def evict(cluster: KubeCluster, metrics: FakeMetrics | None = None) -> Evict:
    return evict_step(cluster, NODE, INSTANCE, metrics=metrics or FakeMetrics())


def on_its_way_out(server: KubeServer, pod: PodInfo) -> bool:
    """Gone, or being deleted."""
    found = server.get_object("pods", pod.name, pod.namespace)
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


@pytest.mark.parametrize(("code", "reason"), [(400, ""), (403, "Forbidden"), (422, "Invalid")])
def test_a_deletion_the_api_server_refuses_is_that_pods_answer_with_the_servers_words(
    cluster: KubeCluster, server: KubeServer, code: int, reason: str
) -> None:
    # Given a webhook that denies the deletion of one pod
    victim = web_pods(cluster)[0]
    why = f"{victim.name} may not be deleted"
    server.admission.deny(Denial(WEBHOOK, "DELETE", "pods", "shop", victim.name, code, reason, why))

    # When the pod is deleted, Then the refusal is the answer, with the server's words
    with pytest.raises(Refused) as refused:
        cluster.delete_pod(victim, grace_seconds=0)
    assert str(refused.value) == f'admission webhook "{WEBHOOK}" denied the request: {why}'
    assert not on_its_way_out(server, victim)


def test_a_forced_delete_the_api_server_refuses_leaves_the_force_policy_to_delete_the_other_pods(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain past its timeout, and a webhook that denies the deletion of the first of the node's pods
    refused, *others = web_pods(cluster)
    server.admission.deny(Denial(WEBHOOK, "DELETE", "pods", "shop", refused.name, 403, "Forbidden", "pinned"))
    metrics = FakeMetrics()

    # When the force policy deletes the pods
    outcome = evict(cluster, metrics)(draining(extra={"polls": 1}), DEADLINE)

    # Then the other pods are deleted, the refused one is counted, and the drain waits for its pods
    assert all(on_its_way_out(server, pod) for pod in others)
    assert not on_its_way_out(server, refused)
    assert metrics.counts["EvictionErrors"] == 1
    assert (outcome.again, outcome.changes["forced_at"]) == (True, DEADLINE)


def test_a_pod_whose_eviction_fails_transiently_leaves_the_other_pods_to_be_evicted(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a webhook that guards the first of the node's pods and answers its eviction 503 (try again later)
    flaky, *others = web_pods(cluster)
    server.admission.deny(
        Denial(WEBHOOK, "CREATE", "pods/eviction", "shop", flaky.name, 503, "ServiceUnavailable", "not now")
    )
    metrics = FakeMetrics()

    # When the drain asks the pods to leave
    outcome = evict(cluster, metrics)(draining(), T0)

    # Then the other pods are evicted, the failure counted as a retry, and the pass counts as the drain's first
    assert all(on_its_way_out(server, pod) for pod in others)
    assert not on_its_way_out(server, flaky)
    assert metrics.counts["StepRetries[step=evict]"] == 1
    assert (outcome.again, outcome.changes["extra"]["polls"]) == (True, 1)
    assert [denied.name for denied in server.admission.denied()] == [flaky.name]


def test_pods_a_finalizer_keeps_are_waited_for_until_a_minute_past_their_deletion_deadline(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node cordoned, and its web pods carrying a finalizer nobody will remove (a controller that is
    # down): the API server keeps them, Terminating, after their kubelet has stopped them
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    kept = web_pods(cluster)
    for pod in kept:
        admin.patch_namespaced_pod(
            pod.name, pod.namespace, {"metadata": {"finalizers": ["example.com/keep"]}}
        )
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start,
        drain_deadline=start + timedelta(seconds=600),
    )
    step = evict(cluster)

    # When the drain evicts them and their kubelet has stopped them
    first = step(record, start)
    server.settle()
    assert all(
        (found := server.get_object("pods", pod.name, pod.namespace)) is not None
        and found["metadata"].get("deletionGracePeriodSeconds") == 0
        for pod in kept
    )
    record = record.model_copy(update=first.changes)

    # Then, while less than a minute has passed since their deletion's deadline, they are not gone: the drain
    # waits for them
    waiting = step(record, start + timedelta(seconds=30))
    assert (waiting.then, waiting.again) == (None, True)
    record = record.model_copy(update=waiting.changes)

    # When more than a minute has passed, Then the drain stops waiting for them and says they are still there
    done = step(record, start + timedelta(seconds=62))
    assert (
        done.changes["outcome"]
        == f"drained; {len(kept)} pods left terminating (past their deletion deadline)"
    )
    assert sorted(done.changes["extra"]["stuck_pods"]["pods"]) == sorted(f"shop/{p.name}" for p in kept)
    assert all(server.get_object("pods", pod.name, pod.namespace) is not None for pod in kept)


def deleted_slowly_by_someone_else(cluster: KubeCluster, server: KubeServer) -> PodInfo:
    """A web pod of the node that uses all the grace it is given to stop, deleted by someone else (a rollout of a
    workload whose pods may take that long) with an hour's grace."""
    slow = web_pods(cluster)[0]
    admin = CoreV1Api(server.api_client())
    annotations = {SHUTDOWN_ANNOTATION: "3600"}
    admin.patch_namespaced_pod(slow.name, slow.namespace, {"metadata": {"annotations": annotations}})
    admin.delete_namespaced_pod(slow.name, slow.namespace, grace_period_seconds=3600)
    assert deletion_grace(server, slow) == 3600
    return slow


def deletion_grace(server: KubeServer, pod: PodInfo) -> int | None:
    """The grace of the pod's deletion in progress, as the API server keeps it."""
    found = server.get_object("pods", pod.name, pod.namespace)
    assert found is not None, f"{pod.name} is gone"
    grace: int | None = found["metadata"].get("deletionGracePeriodSeconds")
    return grace


def test_a_pod_someone_deleted_with_a_longer_grace_than_the_drains_is_evicted_with_the_drains(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a pod deleted with an hour's grace just before the drain
    slow = deleted_slowly_by_someone_else(cluster, server)
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start,
        drain_deadline=start + timedelta(seconds=600),
    )

    # When the drain asks the node's pods to leave
    evict(cluster)(record, start)

    # Then that pod is asked too, and its deletion gets what the drain gives it: its own grace (30 s) within the
    # cap (60 s), not the hour (the API server shortens a deletion in progress)
    assert deletion_grace(server, slow) == 30


def test_the_force_policy_shortens_the_deletion_of_a_pod_someone_deleted_with_a_longer_grace(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain at its timeout, and a pod deleted with an hour's grace meanwhile
    slow = deleted_slowly_by_someone_else(cluster, server)
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start - timedelta(seconds=600),
        drain_deadline=start,
        extra={"polls": 1},
    )

    # When the force policy deletes the pods left
    outcome = evict(cluster)(record, start)

    # Then that pod is deleted too, with the force grace (5 s): "force" leaves no pod its hour
    assert outcome.changes["forced_at"] == start
    assert deletion_grace(server, slow) == 5


def test_pods_of_a_node_its_kubelet_reports_not_ready_are_waited_for_as_on_a_ready_node(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a node whose kubelet reports it NotReady (its container runtime's network not ready: Ready=False,
    # not Unknown) but is there to stop the pods deleted on it, which take their grace (30 s) to stop
    admin = CoreV1Api(server.api_client())
    for pod in web_pods(cluster):
        admin.patch_namespaced_pod(
            pod.name, pod.namespace, {"metadata": {"annotations": {SHUTDOWN_ANNOTATION: "3600"}}}
        )
    server.set_node_ready(NODE, False)
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start,
        drain_deadline=start + timedelta(seconds=600),
    )
    step = evict(cluster)
    record = record.model_copy(update=step(record, start).changes)

    # When the drain looks again 20 s later, their grace not over
    outcome = step(record, start + timedelta(seconds=20))

    # Then it waits for them, as on a Ready node: they are stopping (only a kubelet that stopped reporting,
    # Ready=Unknown, leaves them Terminating for good)
    assert (outcome.then, outcome.again) == (None, True)
    assert all(on_its_way_out(server, pod) for pod in web_pods(cluster))


def test_a_drain_ends_with_the_mirror_and_daemonset_pods_still_there_and_the_others_gone(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node cordoned, with, besides its web pods and its DaemonSet pod, a static pod's mirror, a pod
    # without a controller that keeps data in an emptyDir, and a finished pod (Succeeded): as kubectl drain
    # --ignore-daemonsets --delete-emptydir-data --force sees them
    admin = CoreV1Api(server.api_client())
    server.add_static_pod(NODE, "etcd-proxy")
    spec = V1PodSpec(
        node_name=NODE,
        containers=[V1Container(name="app", image="app")],
        volumes=[V1Volume(name="scratch", empty_dir=V1EmptyDirVolumeSource())],
    )
    for name in ("bare", "finished"):
        admin.create_namespaced_pod("shop", V1Pod(metadata=V1ObjectMeta(name=name), spec=spec))
    server.settle()
    admin.patch_namespaced_pod_status("finished", "shop", {"status": {"phase": "Succeeded"}})
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start,
        drain_deadline=start + timedelta(seconds=600),
    )
    step = evict(cluster)

    # When the drain asks the pods to leave, they go, and the drain looks again
    record = record.model_copy(update=step(record, start).changes)
    server.settle()
    outcome = step(record, start + timedelta(seconds=5))

    # Then it is drained, with only the mirror pod and the DaemonSet pod left on the node
    assert outcome.changes["outcome"] == "drained"
    left = sorted((pod.controller_kind, pod.mirror) for pod in cluster.pods_on(NODE))
    assert left == [("DaemonSet", False), ("Node", True)]


def test_a_node_name_another_instance_took_is_neither_given_a_slot_nor_cordoned(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the name of the instance's node taken by another instance's node: the node went with its instance,
    # and a new instance with the same private IP registered (same DNS name, another provider id)
    server.remove_node(NODE)
    server.add_node(NODE, instance_id="i-0ffffffffffffffff", zone="eu-west-1a")
    finder = NodeFinder(cluster, NoDns())
    slots = FakeSlots()
    waiting = draining(Step.ACQUIRE_SLOT, slot_waiting_since=T0)

    # When the lifecycle that waited for a slot for the name asks again, and (had it a slot) cordons
    acquired = AcquireSlot(
        finder=finder,
        cluster=cluster,
        slots=slots,
        dispatcher=wakes_to_nowhere(),
        policy=policy(),
        metrics=FakeMetrics(),
        events=FakeEvents(),
        records=InMemoryRecords(),
    )(waiting, T0)
    cordoned = cordon(cluster, finder=finder)(draining(Step.CORDON), T0)

    # Then the other instance's node gets no slot and no cordon
    assert slots.requests == []
    assert (acquired.changes["outcome"], cordoned.changes["outcome"]) == ("node-not-found", "node-gone")
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert not node["spec"].get("unschedulable")


def test_a_drain_whose_node_name_another_instance_took_meanwhile_evicts_nothing_there_and_settles(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain in progress (its node's uid recorded), and meanwhile its instance gone, its node deleted,
    # and a new instance of the same private IP registered under the same name, with a pod on it
    record = draining(Step.EVICT, node_uid=cluster.get_node(NODE).uid, extra={"polls": 1})  # type: ignore[union-attr]
    server.remove_node(NODE)
    server.add_node(NODE, instance_id="i-0ffffffffffffffff", zone="eu-west-1a")
    server.settle()
    newcomers = cluster.pods_on(NODE)
    assert newcomers  # the scheduler placed web replicas on the new node

    # When the drain's next poll runs
    outcome = evict(cluster)(record, T0 + timedelta(seconds=60))

    # Then the new instance's pods are left alone, and the drain of a node that is gone settles
    assert not any(on_its_way_out(server, pod) for pod in newcomers)
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "node-gone")


def test_a_node_object_its_kubelet_registers_again_while_draining_is_cordoned_again_within_the_same_drain(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain in progress, the node cordoned by it; and meanwhile the node object deleted (kubectl delete
    # node) and registered again by the instance's kubelet: the same instance, a new uid, not cordoned, and the
    # scheduler placing pods on it
    finder = NodeFinder(cluster, NoDns())
    claim = cordon(cluster, finder=finder)
    record = draining(Step.CORDON, node_uid=cluster.get_node(NODE).uid)  # type: ignore[union-attr]
    record = record.model_copy(update={"step": Step.EVICT, **claim(record, T0).changes})
    server.remove_node(NODE)
    server.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")
    server.settle()
    assert cluster.pods_on(NODE)

    # When the drain's next poll runs, and the step it goes to
    later = T0 + timedelta(seconds=30)
    outcome = evict(cluster)(record, later)
    assert outcome.then is Step.CORDON
    record = record.model_copy(update={"step": Step.CORDON, **outcome.changes})
    again = claim(record, later)

    # Then the new node object is claimed as the old one was (cordoned, annotated), and the drain goes on with
    # the time it had: its start and its deadline are the drain's, not the new claim's
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert node["spec"].get("unschedulable") is True
    assert node["metadata"]["annotations"]["nodecycle.io/owner"] == record.owner
    assert again.changes["node_uid"] == node["metadata"]["uid"]
    assert (again.changes["drain_started_at"], again.changes["drain_deadline"]) == (T0, DEADLINE)


def cleaned_up_once_its_kubelet_runs(
    step: Callable[[LifecycleRecord, datetime], Outcome], record: LifecycleRecord, server: KubeServer
) -> None:
    """The cleanup of ``record``, whose instance is out of the warm pool, run as the engine runs it: its first look
    finds the node Ready, maybe as the kubelet left it before the stop, and looks again (Cleanup._kubelet_awake); the
    instance's kubelet runs again meanwhile (its Lease renewed), and the next look lifts what nodecycle set."""
    first = step(record, T0)
    assert first.again
    before = renewed_at(server)
    server.instance_resumed(NODE)
    deadline = time.monotonic() + 10
    while renewed_at(server) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert renewed_at(server) != before, "no Lease renewal of the resumed kubelet"
    step(record.model_copy(update=first.changes), T0 + timedelta(seconds=first.delay or 10))


def renewed_at(server: KubeServer) -> str | None:
    lease = server.get_object("leases", NODE, "kube-node-lease")
    return None if lease is None else str(lease["spec"]["renewTime"])


def test_a_node_stopped_into_the_warm_pool_comes_back_uncordoned_when_its_state_change_comes_first(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the instance's node cordoned by its terminate action into the warm pool, now complete
    finder = NodeFinder(cluster, NoDns())
    drained = draining(Step.CORDON, destination="WarmPool")
    cordon(cluster, finder=finder)(drained, T0)
    slots = FakeSlots(holders={NODE}, held_for={NODE: drained.id})
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )

    # When Auto Scaling stops the instance and the state change frees what nodecycle held for it before the
    # drain's cleanup runs
    stopped = spot(
        Step.FORGET_NODE,
        transition=Transition.STATE_CHANGE,
        id=f"{INSTANCE}/state-change",
        instance_id=INSTANCE,
    )
    ForgetNode(
        finder=finder, cluster=cluster, slots=slots, dispatcher=waker, instances=NoDns(), policy=policy()
    )(stopped, T0)
    step = Cleanup(
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        autoscaling=FakeAutoscaling(states={INSTANCE: "Pending"}),  # since taken out of the pool again
        metrics=FakeMetrics(),
        events=FakeEvents(),
        instances=Ec2Maintenance(),
    )
    cleaned_up_once_its_kubelet_runs(
        step, drained.model_copy(update={"step": Step.CLEANUP, "drain_started_at": T0}), server
    )

    # Then the node comes back from the warm pool schedulable, without nodecycle's annotations or label
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert not node["spec"].get("unschedulable")
    assert not [key for key in node["metadata"].get("annotations") or {} if key.startswith("nodecycle.io/")]
    assert "node.kubernetes.io/exclude-from-external-load-balancers" not in node["metadata"].get("labels", {})


def test_a_node_back_from_the_warm_pool_keeps_the_cordon_and_the_label_nodecycle_did_not_set(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a node an operator cordoned (kubectl cordon), of a node group that keeps its nodes out of external
    # load balancers by their own label
    CoreV1Api(server.api_client()).patch_node(
        NODE, {"spec": {"unschedulable": True}, "metadata": {"labels": {EXCLUDE_LB_LABEL: "true"}}}
    )
    server.settle()  # (the node lifecycle controller's taint of the cordoned node written)
    # When nodecycle drains it for a scale-in into the warm pool, and cleans up after the completion
    record = draining(Step.CORDON, destination="WarmPool")
    claimed = cordon(cluster)(record, T0)
    if claimed.again:  # (the node written between the cordon's read and its patch, a kubelet's status: 409)
        claimed = cordon(cluster)(record.model_copy(update=claimed.changes), T0)
    assert not claimed.again, claimed
    back = FakeAutoscaling(states={INSTANCE: "Pending"})  # and the instance is taken out of the pool again
    cleaned_up_once_its_kubelet_runs(
        cleanup(cluster, FakeSlots(holders={NODE}, held_for={NODE: record.id}), back),
        record.model_copy(update={"step": Step.CLEANUP, "drain_started_at": T0, **claimed.changes}),
        server,
    )

    # Then nodecycle's annotations are gone, and what it did not set is still there
    stored = server.get_object("nodes", NODE)
    assert stored is not None
    assert stored["spec"].get("unschedulable") is True
    assert (stored["metadata"].get("labels") or {}).get(EXCLUDE_LB_LABEL) == "true"
    assert not [key for key in stored["metadata"].get("annotations") or {} if key.startswith("nodecycle.io/")]


@pytest.mark.parametrize(("code", "reason"), [(400, ""), (403, "Forbidden"), (422, "Invalid")])
def test_a_cordon_the_api_server_refuses_is_told_and_asked_again_at_each_poll_with_the_slot_kept(
    cluster: KubeCluster, server: KubeServer, code: int, reason: str
) -> None:
    # Given a node whose patches an admission webhook denies (a policy engine that guards it)
    why = "nodes of this pool may not be changed"
    server.admission.deny(Denial(WEBHOOK, "UPDATE", "nodes", "*", NODE, code, reason, why))
    slots, metrics, events = FakeSlots(holders={NODE}), FakeMetrics(), FakeEvents()
    step = cordon(cluster, slots=slots, metrics=metrics, events=events)
    record = draining(Step.CORDON, zone="eu-west-1a")

    # When the drain cordons it, twice
    first = step(record, T0)
    record = record.model_copy(update=first.changes)
    second = step(record, T0 + timedelta(seconds=5))

    # Then the refusal is an error an operator sees (the alarm's metric, one Warning event with the server's
    # words), the cordon is asked again at the poll interval, the slot renewed meanwhile, and nothing of the
    # node is touched: no eviction comes before a cordon
    assert (first.again, first.delay, second.again, second.delay) == (True, 5, True, 5)
    assert metrics.counts["EvictionErrors"] == 2
    assert events.written == [(NODE, "CordonRefused", "Warning")]
    assert f'admission webhook "{WEBHOOK}" denied the request: {why}' in events.messages[0]
    assert [request.node for request in slots.requests] == [NODE, NODE]  # each try confirmed or renewed it
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert not node["spec"].get("unschedulable")
    assert not any(on_its_way_out(server, pod) for pod in web_pods(cluster))

    # When the webhook lets the cordon through, Then the drain's time counts from its first try
    server.admission.clear()
    record = record.model_copy(update=second.changes)
    claimed = step(record, T0 + timedelta(seconds=10))
    assert (claimed.then, claimed.again) == (None, False)
    assert (claimed.changes["drain_started_at"], claimed.changes["drain_deadline"]) == (T0, DEADLINE)
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert node["spec"].get("unschedulable") is True


def test_a_cordon_refused_until_the_drain_timeout_settles_the_action_without_evicting(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a node whose patches RBAC-like denial refuses for the whole drain timeout
    server.admission.deny(Denial(WEBHOOK, "UPDATE", "nodes", "*", NODE, 403, "Forbidden", "no"))
    metrics, events = FakeMetrics(), FakeEvents()
    step = cordon(cluster, slots=FakeSlots(holders={NODE}), metrics=metrics, events=events)
    record = draining(Step.CORDON, zone="eu-west-1a")
    record = record.model_copy(update=step(record, T0).changes)

    # When the drain timeout passes with the cordon still refused
    outcome = step(record, DEADLINE)

    # Then the drain timed out (its alarm, its event) and the action is settled: no pod was evicted
    assert (outcome.then, outcome.changes["outcome"]) == (Step.COMPLETE, "drain-timeout-cordon-refused")
    assert metrics.counts["DrainTimeouts"] == 1
    assert (NODE, "DrainTimeout", "Warning") in events.written
    assert not any(on_its_way_out(server, pod) for pod in web_pods(cluster))


@pytest.mark.parametrize("lifecycle", ["an action gone, its instance in service", "a rebalance cordon only"])
def test_a_release_of_the_node_the_api_server_refuses_is_told_and_the_slot_still_given_back(
    cluster: KubeCluster, server: KubeServer, lifecycle: str
) -> None:
    # Given our cordoned node, to be uncordoned (its action turned out gone, its instance stays) or to keep its
    # cordon without our annotations (a rebalance recommendation's cordon only), and then a webhook that denies
    # the node's patches
    if lifecycle == "a rebalance cordon only":
        plan = (Step.CORDON, Step.CLEANUP, Step.DONE)
        record = draining(Step.CORDON, transition=Transition.REBALANCE, plan=plan)
        record = record.model_copy(update={"id": f"{INSTANCE}/rebalance"})
    else:
        record = draining(Step.CORDON)
    claimed = cordon(cluster)(record, T0)
    record = record.model_copy(update={"step": Step.CLEANUP, "outcome": "action-expired", **claimed.changes})
    server.admission.deny(Denial(WEBHOOK, "UPDATE", "nodes", "*", NODE, 403, "Forbidden", "pinned"))
    slots = FakeSlots(holders={NODE}, held_for={NODE: record.id})
    metrics, events = FakeMetrics(), FakeEvents()
    in_service = FakeAutoscaling(states={INSTANCE: "InService"})

    # When the cleanup runs
    outcome = cleanup(cluster, slots, in_service, events, metrics=metrics)(record, T0)

    # Then the refusal is an error told (the alarm's metric, a Warning event with the server's words), and the
    # lifecycle still ends: its slot is given back; what it left on the node stays for an operator (and the
    # sweeper) to clear
    assert (outcome.then, outcome.again) == (None, False)
    assert slots.released == [NODE]
    assert metrics.counts["EvictionErrors"] == 1
    assert (NODE, "ReleaseRefused", "Warning") in events.written
    assert any(f'admission webhook "{WEBHOOK}" denied the request: pinned' in m for m in events.messages)
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert node["spec"].get("unschedulable") is True
    assert node["metadata"]["annotations"].get("nodecycle.io/owner") == record.owner


def test_a_drain_step_the_api_server_throttles_is_retried_no_sooner_than_its_retry_after(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain in progress, and an API server shedding load (API Priority and Fairness): its node read
    # answered 429 with Retry-After: 20
    server.faults.arm([Fault("apf", "kube-throttle", target="GET nodes", limit=1, value=20)], seed=1)
    world = World()
    record = draining(extra={"polls": 1})
    world.records.create(record)
    engine = world.engine({Step.EVICT: evict(cluster)})

    # When the drain's poll runs (and fails)
    engine.handle(world.message(record.id))

    # Then it is retried after what the server asked for, not within the drain's usual 5 s (client-go waits
    # Retry-After too): asking sooner only adds to the load the server sheds
    (sent,) = world.queues.take()
    assert sent.delay >= 20
    assert [firing.fault for firing in server.faults.firings()] == ["apf"]


def test_a_throttled_eviction_is_asked_again_no_sooner_than_its_retry_after(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain, and an API server that sheds its first eviction with Retry-After: 20
    server.faults.arm([Fault("apf", "kube-throttle", target="POST pods/eviction", limit=1, value=20)], seed=1)

    # When the drain asks its pods to leave
    outcome = evict(cluster)(draining(), T0)

    # Then its next poll comes no sooner than the server asked for (the pass stopped at the throttled answer)
    assert outcome.again
    assert outcome.delay >= 20
    assert not any(on_its_way_out(server, pod) for pod in web_pods(cluster))


def test_a_retry_after_is_honoured_only_up_to_a_minute_and_never_past_the_drain_deadline(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given an API server that sheds evictions with a Retry-After of 300 s
    server.faults.arm(
        [Fault("apf", "kube-throttle", target="POST pods/eviction", limit=2, value=300)], seed=1
    )

    # When a drain with ten minutes left, and one with 30 s left, ask their pods to leave
    early = evict(cluster)(draining(), T0)
    late = evict(cluster)(draining(), DEADLINE - timedelta(seconds=30))

    # Then the first waits a minute at most (a server that shed load a minute ago may serve now), the second
    # no longer than its deadline, when its timeout policy applies
    assert (early.delay, late.delay) == (60, 30)
