"""The drain's evictions under PodDisruptionBudgets on the real Kubernetes adapter, against the sandbox API
server: how each 429 of the eviction subresource is told apart (a budget without room, a budget its controller
has not observed since its spec changed, API Priority and Fairness shedding load) and what the drain does."""

from __future__ import annotations

from datetime import timedelta

from kubernetes.client import CoreV1Api, PolicyV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.drain.forget import ForgetNode
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.ports.cluster import Eviction, PodInfo
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.admission import Denial
from tests.integration.kube.cluster import evict_step
from tests.integration.kube.test_kube_drain_steps import DEADLINE, INSTANCE, NODE, draining
from tests.support.fakes import T0, FakeClock, FakeMetrics, InMemoryRecords, RecordingQueues
from tests.unit.drain.test_drain_steps import (
    FakeEvents,
    FakeSlots,
    NoDns,
    cordon,
    policy,
    spot,
)

SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "deployments": [
        {"name": "web", "namespace": "shop", "replicas": 4, "pdb": {"maxUnavailable": 1}},
        {"name": "api", "namespace": "shop", "replicas": 4},
    ],
}


def pods_of(cluster: KubeCluster, app: str) -> list[PodInfo]:
    pods = [pod for pod in cluster.pods_on(NODE) if pod.name.startswith(f"{app}-")]
    assert pods, f"the test needs {app} pods on the node"
    return pods


def evict(cluster: KubeCluster, metrics: FakeMetrics, events: FakeEvents) -> Evict:
    return evict_step(cluster, NODE, INSTANCE, metrics=metrics, events=events)


def on_its_way_out(server: KubeServer, pod: PodInfo) -> bool:
    found = server.get_object("pods", pod.name, pod.namespace)
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


def test_a_budget_its_controller_has_not_observed_yet_holds_back_its_pods_only_and_is_no_overload(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a budget over the web pods whose spec was just changed, before the disruption controller's pass
    web, api = pods_of(cluster, "web"), pods_of(cluster, "api")
    metrics, events = FakeMetrics(), FakeEvents()
    with server.paused_controllers():
        PolicyV1Api(server.api_client()).patch_namespaced_pod_disruption_budget(
            "web", "shop", {"spec": {"maxUnavailable": 2}}
        )

        # When the drain asks the node's pods to leave, the web pods first
        result = cluster.evict(web[0], 30)
        outcome = evict(cluster, metrics, events)(draining(), T0)

    # Then the answer is the budget's (not the API server shedding load): the other pods are evicted
    assert result.kind is Eviction.BLOCKED, result
    assert "still being processed" in result.detail
    assert metrics.counts.get("EvictionsThrottled", 0) == 0
    assert all(on_its_way_out(server, pod) for pod in api)
    assert not any(on_its_way_out(server, pod) for pod in web)
    # and the drain waits for its next poll, where the web pods are asked again
    assert outcome.again
    assert metrics.counts["EvictionsBlockedByPdb"] == len(web)


def test_a_node_someone_uncordons_while_draining_is_cordoned_again_before_any_more_eviction(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain in progress, the node cordoned by it; and meanwhile someone uncordons it (kubectl uncordon):
    # the scheduler may place the evicted pods' replacements on it again, to be evicted again, up to the timeout
    claim = cordon(cluster, finder=NodeFinder(cluster, NoDns()))
    record = draining(Step.CORDON, node_uid=cluster.get_node(NODE).uid)  # type: ignore[union-attr]
    record = record.model_copy(update={"step": Step.EVICT, **claim(record, T0).changes})
    CoreV1Api(server.api_client()).patch_node(NODE, {"spec": {"unschedulable": False}})
    server.reset_history()

    # When the drain's next poll runs, and the step it goes to
    later = T0 + timedelta(seconds=30)
    outcome = evict(cluster, FakeMetrics(), FakeEvents())(record, later)

    # Then it evicts nothing on an uncordoned node, but claims it again, with the drain's time kept
    assert not [e for e in server.history() if e.resource == "pods/eviction"]
    assert outcome.then is Step.CORDON
    record = record.model_copy(update={"step": Step.CORDON, **outcome.changes})
    again = claim(record, later)
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert node["spec"].get("unschedulable") is True
    assert (again.changes["drain_started_at"], again.changes["drain_deadline"]) == (T0, DEADLINE)


def test_a_budget_still_being_processed_is_not_what_the_drain_tells_of_its_blocked_pods(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a drain whose first pass meets the web pods' budget just edited, before its controller's pass
    web = pods_of(cluster, "web")
    metrics, events = FakeMetrics(), FakeEvents()
    drain = evict(cluster, metrics, events)
    policy_api = PolicyV1Api(server.api_client())
    with server.paused_controllers():
        policy_api.patch_namespaced_pod_disruption_budget(
            "web", "shop", {"spec": {"maxUnavailable": None, "minAvailable": 4}}
        )
        first = drain(draining(), T0)
    record = draining().model_copy(update=first.changes)

    # When the controller has observed the budget (no room now) and the drain polls again
    server.settle()
    second = drain(record, T0 + timedelta(seconds=10))

    # Then the pods are still asked at every poll, and what is told of each is the budget's lasting answer (how
    # many pods it needs), not the 429 of a budget still being processed, which a later poll settles anyway
    assert second.again
    assert not any(on_its_way_out(server, pod) for pod in web)
    told = [
        m
        for (_, reason, _), m in zip(events.written, events.messages, strict=True)
        if reason == "EvictionBlocked"
    ]
    assert told
    assert not [m for m in told if "still being processed" in m]
    assert all("needs 4 healthy pods" in m for m in told)
    assert metrics.counts["EvictionsBlockedByPdb"] == 2 * len(web)


def claimed_by_its_drain(cluster: KubeCluster) -> tuple[LifecycleRecord, FakeSlots]:
    """The instance's node cordoned and annotated by its drain, which holds the node's slot."""
    drained = draining(Step.CORDON)
    cordon(cluster, finder=NodeFinder(cluster, NoDns()))(drained, T0)
    return drained, FakeSlots(holders={NODE}, held_for={NODE: drained.id})


def forget_after_a_stop(cluster: KubeCluster, slots: FakeSlots) -> Outcome:
    """FORGET_NODE of the state change of the instance stopped outside the hooks: what frees its node and slot."""
    stopped = spot(
        Step.FORGET_NODE,
        transition=Transition.STATE_CHANGE,
        id=f"{INSTANCE}/state-change",
        instance_id=INSTANCE,
    )
    waker = Dispatcher(
        records=InMemoryRecords(), queues=RecordingQueues(), clock=FakeClock(T0), metrics=FakeMetrics()
    )
    forget = ForgetNode(
        finder=NodeFinder(cluster, NoDns()),
        cluster=cluster,
        slots=slots,
        dispatcher=waker,
        instances=NoDns(),
        policy=policy(),
    )
    return forget(stopped, T0)


def test_an_instance_gone_without_a_hook_frees_its_slot_though_the_api_server_refuses_the_release_of_its_node(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the instance's node claimed by its drain, and a webhook that denies the node's patches
    drained, slots = claimed_by_its_drain(cluster)
    server.admission.deny(
        Denial("guard.example.com", "UPDATE", "nodes", "*", NODE, 403, "Forbidden", "pinned")
    )

    # When the instance stops outside the hooks and its state change frees what nodecycle held for it
    outcome = forget_after_a_stop(cluster, slots)

    # Then the node's refusal (its annotations stay, for the sweeper) does not keep the instance's slot held
    assert slots.forgotten == [INSTANCE]
    assert (outcome.then, outcome.again) == (None, False)
    node = server.get_object("nodes", NODE)
    assert node is not None
    assert node["metadata"]["annotations"].get("nodecycle.io/owner") == drained.owner


def test_an_instance_gone_without_a_hook_frees_its_slot_though_the_api_server_refuses_to_show_its_node(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the instance's node claimed by its drain, and RBAC refusing the reads of nodes for a while
    _, slots = claimed_by_its_drain(cluster)
    server.faults.arm([Fault("rbac", "kube-forbidden", target="GET nodes", limit=10)], seed=1)

    # When the instance stops outside the hooks and its state change frees what nodecycle held for it
    outcome = forget_after_a_stop(cluster, slots)

    # Then its slot is freed all the same (instance ids are never reused: no node is needed to know it)
    assert slots.forgotten == [INSTANCE]
    assert (outcome.then, outcome.again) == (None, False)
