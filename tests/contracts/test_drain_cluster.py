"""The cluster as the drain steps see it: FakeCluster and FakeEvents (tests/unit/drain/test_drain_steps.py) and
KubeCluster and KubeEvents on the sandbox's API server (the drain function's RBAC), given the same node and pods,
answer alike through the ports (nodecycle.domain.ports.cluster), so that a unit test of a step never passes
on an answer the API server would not give.

Each case arranges one cluster on both sides (``Side``: the fake's state set as a scenario sets it, the server's
objects written as a kubelet, a controller or an operator writes them) and then asks through the port only:
a node claimed and released (already cordoned, changed since it was read: 409, gone: 404), evictions under
PodDisruptionBudgets (no room: 429, room, a pod gone or replaced, a pod already Terminating, grace 0), the
pods bound to a node (DaemonSet, mirror, finished and Terminating pods; a list the API server fails), a
node's readiness and its kubelet's Lease, and Events (what is written; nothing, and no error, on a 403 or for
a namespace that is gone).

What the fake does not model, and the unit tests arrange by hand instead: a budget's room (a pod is ``blocked``
or not, whatever was evicted before), the kubelet (a pod evicted with a grace period stays Terminating until the
test removes it)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Protocol

import pytest
import yaml
from kubernetes.client import ApiClient, CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.cluster import (
    Claim,
    Cluster,
    Events,
    Eviction,
    NodeInfo,
    PodInfo,
    Refused,
)
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.budget.conftest import DRAIN_KEY, RBAC, act_as_drain
from tests.unit.drain.builders import pod
from tests.unit.drain.test_drain_steps import FakeCluster, FakeEvents, node

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
OTHER = "ip-10-0-2-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
OWNER = "stack-a"
PROGRESS = '{"instance":"i-0a1b2c3d4e5f60101","transition":"t","token":"x"}'
KEPT = 3600  # how long the sandbox's kubelet takes to stop a pod: deleted pods stay Terminating
SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {
            "privateIp": "10.0.1.10",
            "instanceId": INSTANCE,
            "zone": "eu-west-1a",
            "staticPods": [{"name": "probe", "namespace": "kube-system"}],
        }
    ],
    "daemonSets": [{"name": "kube-proxy", "namespace": "kube-system"}],
    "deployments": [
        # web: no room (2 of 2 must stay); api: room for one disruption
        {
            "name": "web",
            "namespace": "shop",
            "replicas": 2,
            "shutdownSeconds": KEPT,
            "pdb": {"minAvailable": 2},
        },
        {
            "name": "api",
            "namespace": "shop",
            "replicas": 2,
            "shutdownSeconds": KEPT,
            "pdb": {"maxUnavailable": 1},
        },
    ],
}


class Side(Protocol):
    """One cluster, arranged and observed alike on both sides; the cases ask ``cluster`` and ``events``."""

    cluster: Cluster
    events: Events

    def settled(self) -> None:
        """The cluster's own controllers done with what the last writes started (see ``the_node``)."""
        ...

    def cordon_by_operator(self) -> None: ...
    def label_by_operator(self) -> None: ...
    def remove_node(self) -> None: ...
    def register_again(self) -> None: ...
    def add_other_node(self) -> None: ...
    def set_ready(self, ready: bool) -> None: ...
    def lose_kubelet(self) -> None: ...
    def add_finished_pod(self) -> None: ...
    def delete_by_someone(self, name: str, grace: int) -> None: ...
    def forbid(self, resource: str) -> None: ...
    def remove_namespace(self, namespace: str) -> None: ...
    def start_deleting_namespace(self, namespace: str) -> None:
        """The namespace is deleted, its controller not there yet: Terminating, its pods still running."""
        ...

    def fail_pod_lists(self) -> None:
        """Every list of pods fails with a 500 (an overloaded etcd range); every other request is served."""
        ...

    def shed_evictions(self, count: int, retry_after: float) -> None:
        """API Priority and Fairness rejects the next ``count`` evictions: 429, Retry-After ``retry_after``."""
        ...

    def written(self) -> list[tuple[str, str | None, str, str, str]]:
        """The Events written: (subject, its uid, reason, type, message); a pod's subject is namespace/name."""
        ...


# -- the fake ------------------------------------------------------------------------------------------------


def fake_pods() -> list[PodInfo]:
    """The pods the server's seed puts on NODE, as the unit tests build them."""
    return [
        pod("kube-proxy-a", namespace="kube-system", controller_kind="DaemonSet", grace_period=30),
        pod(f"probe-{NODE}", namespace="kube-system", controller_kind="Node", mirror=True, grace_period=30),
        *(pod(f"{app}-{i}", namespace="shop", grace_period=30) for app in ("web", "api") for i in (1, 2)),
    ]


class FakeSide:
    def __init__(self) -> None:
        self.fake = FakeCluster(
            nodes={NODE: node(name=NODE, instance_id=INSTANCE, uid="uid-node")},
            pods=fake_pods(),
            pod_nodes={p.name: NODE for p in fake_pods()},
            blocked={"web-1", "web-2"},
            budget_of={"api-1": "api", "api-2": "api"},
            room={"api": 1},
        )
        self.fake_events = FakeEvents()
        self.cluster: Cluster = self.fake
        self.events: Events = self.fake_events

    def _change(self, **changes: object) -> None:
        current = self.fake.nodes[NODE]
        version = str(int(current.resource_version) + 1)
        self.fake.nodes[NODE] = current.model_copy(update={**changes, "resource_version": version})

    def settled(self) -> None:
        pass  # (no controllers)

    def cordon_by_operator(self) -> None:
        self._change(unschedulable=True)

    def label_by_operator(self) -> None:
        self._change()

    def remove_node(self) -> None:
        del self.fake.nodes[NODE]
        self.fake.leases.pop(NODE, None)

    def register_again(self) -> None:
        # (as a scenario would write it: the same version as before, but another uid)
        self.fake.nodes[NODE] = node(name=NODE, instance_id=INSTANCE, uid="uid-node-again")

    def add_other_node(self) -> None:
        self.fake.nodes[OTHER] = node(name=OTHER, instance_id="i-0a1b2c3d4e5f60201", uid="uid-other")
        self.fake.pods.append(pod("kube-proxy-b", namespace="kube-system", controller_kind="DaemonSet"))
        self.fake.pod_nodes["kube-proxy-b"] = OTHER

    def set_ready(self, ready: bool) -> None:
        self._change(ready=ready)

    def lose_kubelet(self) -> None:
        self._change(ready=False, kubelet_lost=True)

    def add_finished_pod(self) -> None:
        # (the fake has no phases: a finished pod is listed as any other)
        self.fake.pods.append(pod("report", namespace="shop", controller_kind=None, grace_period=30))
        self.fake.pod_nodes["report"] = NODE

    def delete_by_someone(self, name: str, grace: int) -> None:
        found = next(p for p in self.fake.pods if p.name == name)
        self.fake._deleting(found, grace)

    def forbid(self, resource: str) -> None:
        why = f'{resource} is forbidden: User "nodecycle-DrainFunction" cannot do it'
        if resource == "pods":
            self.fake.pods_refused = why
        elif resource == "leases":
            self.fake.leases_refused = why
        else:
            self.fake_events.refused = why

    def remove_namespace(self, namespace: str) -> None:
        self.fake.pods = [p for p in self.fake.pods if p.namespace != namespace]
        self.fake_events.gone_namespaces.add(namespace)

    def start_deleting_namespace(self, namespace: str) -> None:
        self.fake.ending_namespaces.add(namespace)
        self.fake_events.gone_namespaces.add(namespace)

    def fail_pod_lists(self) -> None:
        self.fake.pods_failing = "HTTP 500 Internal error occurred: etcdserver: request timed out"

    def shed_evictions(self, count: int, retry_after: float) -> None:
        self.fake.shed, self.fake.shed_retry_after = count, retry_after

    def written(self) -> list[tuple[str, str | None, str, str, str]]:
        events = self.fake_events
        return [
            (subject, uid, reason, kind, message)
            for (subject, reason, kind), uid, message in zip(
                events.written, events.uids, events.messages, strict=True
            )
        ]


# -- the API server ------------------------------------------------------------------------------------------


def rbac_without(resource: str) -> str:
    """deploy/rbac.yaml without the drain's rule on ``resource`` (a deployment whose RBAC predates it)."""
    documents = list(yaml.safe_load_all(RBAC.read_text()))
    for doc in documents:
        if doc["kind"] in ("ClusterRole", "Role") and doc["metadata"]["name"].startswith("nodecycle-drain"):
            doc["rules"] = [rule for rule in doc["rules"] if resource not in rule["resources"]]
    return yaml.safe_dump_all(documents)


class ServerSide:
    def __init__(self, kube: KubeServer, client: ApiClient) -> None:
        self.kube = kube
        self.admin = CoreV1Api(kube.api_client())
        self.cluster: Cluster = KubeCluster(lambda: client)
        self.events: Events = KubeEvents(lambda: client, owner=OWNER)

    def close(self) -> None:
        self.admin.api_client.close()

    def settled(self) -> None:
        self.kube.settle()

    def cordon_by_operator(self) -> None:
        self.admin.patch_node(NODE, {"spec": {"unschedulable": True}})

    def label_by_operator(self) -> None:
        self.admin.patch_node(NODE, {"metadata": {"labels": {"team": "payments"}}})

    def remove_node(self) -> None:
        self.kube.remove_node(NODE)
        self.kube.settle()  # the garbage collector: the node's Lease goes with it

    def register_again(self) -> None:
        self.kube.add_node(NODE, instance_id=INSTANCE, zone="eu-west-1a")

    def add_other_node(self) -> None:
        self.kube.add_node(OTHER, instance_id="i-0a1b2c3d4e5f60201", zone="eu-west-1b")
        self.kube.settle()

    def set_ready(self, ready: bool) -> None:
        self.kube.set_node_ready(NODE, ready)
        self.kube.settle()

    def lose_kubelet(self) -> None:
        self.kube.kill_kubelet(NODE, grace_seconds=0)  # the node lifecycle controller's grace: over at once
        self.kube.settle()

    def _name(self, name: str) -> str:
        """A seeded pod's generated name, for the fake's ``web-1`` and the like."""
        prefix, index = name.rsplit("-", 1)
        found = sorted(p.name for p in self.cluster.pods_on(NODE) if p.name.startswith(f"{prefix}-"))
        return found[int(index) - 1]

    def add_finished_pod(self) -> None:
        spec = {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "containers": [{"name": "report", "image": "busybox"}],
        }
        body = {"metadata": {"name": "report"}, "spec": spec}
        self.admin.create_namespaced_pod("shop", body)  # type: ignore[arg-type]  # (the client takes JSON)
        self.admin.patch_namespaced_pod_status("report", "shop", {"status": {"phase": "Succeeded"}})

    def delete_by_someone(self, name: str, grace: int) -> None:
        self.admin.delete_namespaced_pod(self._name(name), "shop", grace_period_seconds=grace)

    def forbid(self, resource: str) -> None:
        self.kube.apply(rbac_without(resource))

    def remove_namespace(self, namespace: str) -> None:
        self.kube.delete_namespace(namespace)

    def start_deleting_namespace(self, namespace: str) -> None:
        self.kube.namespace_controller_lag_seconds = 3600
        self.admin.delete_namespace(namespace)

    def fail_pod_lists(self) -> None:
        # (a GET of one pod is "GET pods" too: the drain reads none)
        self.kube.faults.arm([Fault("lists", "kube-error", target="GET pods")], seed=1)

    def shed_evictions(self, count: int, retry_after: float) -> None:
        shed = Fault("shed", "kube-throttle", target="POST pods/eviction", limit=count, value=retry_after)
        self.kube.faults.arm([shed], seed=1)

    def written(self) -> list[tuple[str, str | None, str, str, str]]:
        found = []
        for event in sorted(self.kube.objects("events"), key=lambda e: int(e["metadata"]["resourceVersion"])):
            subject = event["involvedObject"]
            name = (
                f"{subject['namespace']}/{subject['name']}" if subject.get("namespace") else subject["name"]
            )
            found.append((name, subject.get("uid"), event["reason"], event["type"], event["message"]))
        return found


@pytest.fixture(params=["fake", "api-server"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    if request.param == "fake":
        yield FakeSide()
        return
    # (pods that start at once: the cluster is settled in milliseconds, not the 0.2 s of a pod's start)
    with KubeServer(tls=True, pod_start_seconds=0) as kube:
        act_as_drain(kube)
        kube.seed(SEED)
        kube.settle()
        client = kube.api_client(DRAIN_KEY)
        server = ServerSide(kube, client)
        yield server
        server.close()
        client.close()


def the_node(side: Side) -> NodeInfo:
    # Read once the controllers are done: the node lifecycle controller taints a cordoned node unschedulable
    # (kube-controller-manager's doNoScheduleTaintingPass), a write of its own after the cordon (an operator's, or a
    # release that keeps it); a read before it lands holds a version the next claim conflicts with (two fresh-clone
    # runs met it, in two of the cases). The product re-reads on a conflict; the cases read the node as it settles.
    side.settled()
    found = side.cluster.get_node(NODE)
    assert found is not None
    return found


def named(side: Side, name: str) -> PodInfo:
    """The pod the fake calls ``name`` (web-1: the first web pod by name)."""
    prefix, index = name.rsplit("-", 1)
    pods = sorted(
        (p for p in side.cluster.pods_on(NODE) if p.name.startswith(f"{prefix}-")), key=lambda p: p.name
    )
    return pods[int(index) - 1]


def claim(side: Side, read: NodeInfo, *, cordon: bool = True, lb: bool = True) -> Claim:
    return side.cluster.claim_node(read, owner=OWNER, in_progress=PROGRESS, cordon=cordon, exclude_from_lb=lb)


# -- nodes: claimed, released, read back -------------------------------------------------------------------


def test_a_claim_is_read_back_with_its_annotations_cordon_and_label_under_a_new_version(side: Side) -> None:
    before = the_node(side)
    assert (before.owner, before.unschedulable, before.excluded_from_lb) == (None, False, False)

    assert claim(side, before) is Claim.CLAIMED

    after = the_node(side)
    assert (after.owner, after.in_progress, after.unschedulable, after.excluded_from_lb) == (
        OWNER,
        PROGRESS,
        True,
        True,
    )
    assert after.resource_version != before.resource_version


def test_a_claim_without_cordon_or_label_leaves_the_node_schedulable_and_unlabelled(side: Side) -> None:
    assert claim(side, the_node(side), cordon=False, lb=False) is Claim.CLAIMED
    after = the_node(side)
    assert (after.owner, after.unschedulable, after.excluded_from_lb) == (OWNER, False, False)


def test_a_node_an_operator_cordoned_is_claimed_when_read_after_the_cordon(side: Side) -> None:
    side.cordon_by_operator()
    read = the_node(side)
    assert read.unschedulable

    assert claim(side, read, cordon=False) is Claim.CLAIMED
    assert the_node(side).unschedulable  # a claim without cordon does not lift anyone's


def test_a_node_that_changed_since_it_was_read_is_a_conflict_and_is_left_as_it_is(side: Side) -> None:
    read = the_node(side)
    side.label_by_operator()

    assert claim(side, read) is Claim.CONFLICT
    assert side.cluster.release_node(read, uncordon=True) is Claim.CONFLICT
    after = the_node(side)
    assert (after.owner, after.unschedulable) == (None, False)


def test_a_node_claimed_once_is_a_conflict_for_a_second_claim_from_the_same_read(side: Side) -> None:
    read = the_node(side)
    assert claim(side, read) is Claim.CLAIMED
    assert claim(side, read) is Claim.CONFLICT
    assert side.cluster.release_node(read) is Claim.CONFLICT
    assert the_node(side).owner == OWNER


def test_a_node_gone_since_it_was_read_is_gone_for_a_claim_and_a_release(side: Side) -> None:
    read = the_node(side)
    side.remove_node()

    assert side.cluster.get_node(NODE) is None
    assert claim(side, read) is Claim.GONE
    assert side.cluster.release_node(read) is Claim.GONE


def test_a_node_registered_again_under_its_name_is_a_conflict_for_a_claim_from_a_read_before(
    side: Side,
) -> None:
    read = the_node(side)
    side.remove_node()
    side.register_again()

    assert the_node(side).uid != read.uid
    assert claim(side, read) is Claim.CONFLICT
    assert side.cluster.release_node(read) is Claim.CONFLICT
    assert claim(side, the_node(side)) is Claim.CLAIMED


@pytest.mark.parametrize("uncordon", [True, False])
def test_a_release_removes_the_annotations_and_lifts_only_what_it_is_asked_to(
    side: Side, uncordon: bool
) -> None:
    assert claim(side, the_node(side)) is Claim.CLAIMED

    released = side.cluster.release_node(the_node(side), uncordon=uncordon, unlabel=uncordon)

    assert released is Claim.CLAIMED
    after = the_node(side)
    assert (after.owner, after.in_progress, after.released_for) == (None, None, None)
    assert (after.unschedulable, after.excluded_from_lb) == (not uncordon, not uncordon)


def test_a_release_for_a_lifecycle_marks_the_node_and_the_next_claim_clears_the_mark(side: Side) -> None:
    assert claim(side, the_node(side)) is Claim.CLAIMED
    assert side.cluster.release_node(the_node(side), released_for="i-0/terminate/x") is Claim.CLAIMED
    assert the_node(side).released_for == "i-0/terminate/x"

    assert claim(side, the_node(side)) is Claim.CLAIMED
    assert (the_node(side).released_for, the_node(side).owner) == (None, OWNER)


def test_the_node_is_found_by_its_name_and_by_its_instance(side: Side) -> None:
    side.add_other_node()
    for found in (side.cluster.find_node(INSTANCE, NODE), side.cluster.find_node(INSTANCE, None)):
        assert found is not None
        assert found.name == NODE
    assert side.cluster.find_node(INSTANCE, OTHER) is not None  # not its name: found by provider id
    assert side.cluster.find_node(INSTANCE, OTHER, scan=False) is None
    assert side.cluster.find_node("i-0ffffffffffffffff", NODE) is None


# -- readiness and the kubelet's Lease --------------------------------------------------------------------------


def test_a_node_not_ready_is_read_as_not_ready_with_its_kubelet_still_there(side: Side) -> None:
    assert (the_node(side).ready, the_node(side).kubelet_lost) == (True, False)
    side.set_ready(False)
    assert (the_node(side).ready, the_node(side).kubelet_lost) == (False, False)


def test_a_node_whose_kubelet_is_lost_is_read_as_such(side: Side) -> None:
    side.lose_kubelet()
    assert (the_node(side).ready, the_node(side).kubelet_lost) == (False, True)


def test_a_live_nodes_lease_is_read_and_a_gone_nodes_is_none(side: Side) -> None:
    renewed = side.cluster.lease_renewed_at(NODE)
    assert renewed is not None
    assert renewed.tzinfo is not None
    assert side.cluster.lease_renewed_at(OTHER) is None

    side.remove_node()
    assert side.cluster.lease_renewed_at(NODE) is None


def test_a_lease_the_role_may_not_read_is_refused(side: Side) -> None:
    side.forbid("leases")
    with pytest.raises(Refused):
        side.cluster.lease_renewed_at(NODE)


# -- the pods of a node -----------------------------------------------------------------------------------------


def shape(pods: list[PodInfo]) -> list[tuple[str, str, str | None, bool, bool]]:
    """What the drain reads of each pod (its name's stem: the server generates the rest)."""
    return sorted(
        (p.namespace, p.name.split("-")[0], p.controller_kind, p.mirror, p.terminating) for p in pods
    )


def test_a_nodes_pods_are_its_daemonset_mirror_and_workload_pods_and_no_other_nodes(side: Side) -> None:
    side.add_other_node()
    assert shape(side.cluster.pods_on(NODE)) == [
        ("kube-system", "kube", "DaemonSet", False, False),
        ("kube-system", "probe", "Node", True, False),
        ("shop", "api", "ReplicaSet", False, False),
        ("shop", "api", "ReplicaSet", False, False),
        ("shop", "web", "ReplicaSet", False, False),
        ("shop", "web", "ReplicaSet", False, False),
    ]
    assert [p.grace_period for p in side.cluster.pods_on(NODE)] == [30] * 6
    assert shape(side.cluster.pods_on(OTHER)) == [("kube-system", "kube", "DaemonSet", False, False)]
    assert side.cluster.pods_on("ip-10-9-9-9.eu-west-1.compute.internal") == []


def test_finished_and_terminating_pods_are_still_the_nodes(side: Side) -> None:
    side.cordon_by_operator()  # (the replacement of a pod deleted is not scheduled here)
    side.add_finished_pod()
    side.delete_by_someone("web-1", grace=300)

    pods = side.cluster.pods_on(NODE)

    assert ("shop", "report", None, False, False) in shape(pods)
    assert len(pods) == 7
    terminating = [p for p in pods if p.terminating]
    assert [(p.name.split("-")[0], p.deletion_grace) for p in terminating] == [("web", 300)]
    (web,) = terminating
    assert web.deletion_at is not None
    assert web.deletion_requested_at == web.deletion_at - timedelta(seconds=300)


def test_pods_the_role_may_not_list_are_refused(side: Side) -> None:
    side.forbid("pods")
    with pytest.raises(Refused):
        side.cluster.pods_on(NODE)


def test_a_list_of_pods_the_api_server_fails_is_transient_and_fails_nothing_else(side: Side) -> None:
    # Given an API server whose lists of pods fail, a pod of the node read before
    api = named(side, "api-1")
    side.fail_pod_lists()

    # Then the node's pods, whole or their metadata, are a TransientError (the drain polls again), neither a
    # refusal nor a node found empty
    with pytest.raises(TransientError, match="500"):
        side.cluster.pods_on(NODE)
    with pytest.raises(TransientError, match="500"):
        side.cluster.pod_metadata_on(NODE)
    # And the node's read and the pod's eviction are served
    assert the_node(side).name == NODE
    assert side.cluster.evict(api, 30).kind is Eviction.EVICTED


# -- evictions --------------------------------------------------------------------------------------------------


def test_an_eviction_a_budget_without_room_refuses_is_blocked_and_the_pod_stays(side: Side) -> None:
    web = named(side, "web-1")

    result = side.cluster.evict(web, 30)

    assert result.kind is Eviction.BLOCKED
    assert "disruption budget" in result.detail
    assert not named(side, "web-1").terminating


def test_an_eviction_a_budget_with_room_allows_makes_the_pod_terminate_with_the_grace_asked(
    side: Side,
) -> None:
    api = named(side, "api-1")

    assert side.cluster.evict(api, 20).kind is Eviction.EVICTED

    after = next(p for p in side.cluster.pods_on(NODE) if p.name == api.name)
    assert (after.terminating, after.deletion_grace, after.uid) == (True, 20, api.uid)


def test_a_budget_with_room_for_one_disruption_blocks_the_next_eviction(side: Side) -> None:
    side.cordon_by_operator()  # (as a drain does: the evicted pod's replacement is not Ready before the next)
    first, second = named(side, "api-1"), named(side, "api-2")

    assert side.cluster.evict(first, 20).kind is Eviction.EVICTED
    assert side.cluster.evict(second, 20).kind is Eviction.BLOCKED
    assert not named(side, "api-2").terminating


def test_a_replaced_pod_under_a_budget_with_room_is_gone_and_its_eviction_still_takes_the_room(
    side: Side,
) -> None:
    # (kube-apiserver records the disruption in the budget, then deletes with the uid precondition: 409)
    side.cordon_by_operator()
    replaced = named(side, "api-1").model_copy(update={"uid": "0b1d3c2e-0000-0000-0000-000000000000"})

    assert side.cluster.evict(replaced, 20).kind is Eviction.GONE
    assert side.cluster.evict(named(side, "api-2"), 20).kind is Eviction.BLOCKED


def test_a_pod_already_terminating_is_evicted_whatever_its_budget_and_only_ever_sooner(side: Side) -> None:
    side.cordon_by_operator()
    side.delete_by_someone("web-1", grace=300)
    web = named(side, "web-1")
    asked = web.deletion_requested_at

    assert side.cluster.evict(web, 30).kind is Eviction.EVICTED
    shorter = next(p for p in side.cluster.pods_on(NODE) if p.name == web.name)
    assert (shorter.deletion_grace, shorter.deletion_requested_at) == (30, asked)

    assert side.cluster.evict(shorter, 60).kind is Eviction.EVICTED  # a longer grace changes nothing
    again = next(p for p in side.cluster.pods_on(NODE) if p.name == web.name)
    assert (again.deletion_grace, again.deletion_at) == (30, shorter.deletion_at)


def test_an_eviction_with_no_grace_removes_the_pod_at_once(side: Side) -> None:
    api = named(side, "api-1")

    assert side.cluster.evict(api, 0).kind is Eviction.EVICTED

    assert api.name not in {p.name for p in side.cluster.pods_on(NODE)}


def test_an_eviction_the_api_server_sheds_is_throttled_with_its_retry_after_whatever_the_pod(
    side: Side,
) -> None:
    # Given a pod of the node and one gone since the list, and an API server shedding the next two evictions
    # (API Priority and Fairness: rejected before any handler looks at the pod)
    api = named(side, "api-1")
    gone = api.model_copy(update={"name": "api-gone", "uid": "0b1d3c2e-0000-0000-0000-000000000000"})
    side.shed_evictions(2, retry_after=7)

    # Then both are throttled, the gone one too, with the server's Retry-After; nothing is done
    for asked in (gone, api):
        answer = side.cluster.evict(asked, 30)
        assert (answer.kind, answer.retry_after) == (Eviction.THROTTLED, 7)
    assert not named(side, "api-1").terminating

    # And once the server serves again, each is answered for itself
    assert side.cluster.evict(gone, 30).kind is Eviction.GONE
    assert side.cluster.evict(api, 30).kind is Eviction.EVICTED


def test_a_pod_gone_is_gone_for_an_eviction_and_a_deletion(side: Side) -> None:
    api = named(side, "api-1")
    assert side.cluster.delete_pod(api, 0) is True

    assert side.cluster.evict(api, 30).kind is Eviction.GONE
    assert side.cluster.delete_pod(api, 30) is False


def test_a_pod_replaced_under_the_same_name_is_gone_for_an_eviction_and_a_deletion(side: Side) -> None:
    api = named(side, "api-1")
    replaced = api.model_copy(update={"uid": "0b1d3c2e-0000-0000-0000-000000000000"})

    assert side.cluster.evict(replaced, 30).kind is Eviction.GONE
    assert side.cluster.delete_pod(replaced, 30) is False
    assert not named(side, "api-1").terminating


def test_a_pod_replaced_under_a_budget_without_room_is_blocked_before_its_uid_is_checked(side: Side) -> None:
    web = named(side, "web-1")
    replaced = web.model_copy(update={"uid": "0b1d3c2e-0000-0000-0000-000000000000"})

    # (kube-apiserver's eviction consults the budget before it deletes with the uid precondition)
    assert side.cluster.evict(replaced, 30).kind is Eviction.BLOCKED
    assert side.cluster.delete_pod(replaced, 30) is False
    assert not named(side, "web-1").terminating


def test_a_deletion_ignores_the_budget(side: Side) -> None:
    web = named(side, "web-2")

    assert side.cluster.delete_pod(web, 5) is True

    after = next(p for p in side.cluster.pods_on(NODE) if p.name == web.name)
    assert (after.terminating, after.deletion_grace) == (True, 5)


# -- events -----------------------------------------------------------------------------------------------------


def test_events_are_written_on_the_node_and_on_the_pod_as_told(side: Side) -> None:
    web = named(side, "web-1")
    node_uid = the_node(side).uid

    side.events.on_node(NODE, node_uid, "Cordoned", "Cordoned for the termination of i-0a1b2c3d4e5f60101")
    side.events.on_pod(web, "EvictionBlocked", "The disruption budget web needs 2", warning=True)
    side.events.on_node(NODE, None, "Drained", "no uid known")

    assert side.written() == [
        (NODE, node_uid, "Cordoned", "Normal", "Cordoned for the termination of i-0a1b2c3d4e5f60101"),
        (f"shop/{web.name}", web.uid, "EvictionBlocked", "Warning", "The disruption budget web needs 2"),
        (NODE, None, "Drained", "Normal", "no uid known"),
    ]


def test_a_message_longer_than_an_event_takes_is_cut(side: Side) -> None:
    side.events.on_node(NODE, None, "DrainTimeout", "x" * 1000 + "y" * 100)
    ((_, _, _, _, message),) = side.written()
    assert message == "x" * 1000 + "y" * 24


def test_an_event_the_role_may_not_write_is_forgotten_without_an_error(side: Side) -> None:
    side.forbid("events")
    side.events.on_node(NODE, None, "Cordoned", "not written")
    assert side.written() == []


def test_an_event_on_a_pod_whose_namespace_is_gone_is_forgotten_without_an_error(side: Side) -> None:
    web = named(side, "web-1")
    side.remove_namespace("shop")

    side.events.on_pod(web, "EvictionBlocked", "not written", warning=True)
    side.events.on_node(NODE, None, "Drained", "written")

    assert [(subject, reason) for subject, _, reason, _, _ in side.written()] == [(NODE, "Drained")]


def test_a_nodes_metadata_read_says_the_version_it_was_read_at_and_moves_with_any_change(side: Side) -> None:
    # Given the node as read whole
    whole = the_node(side)

    # Then its metadata read says the same uid and version; after any change, another version; gone, None
    assert side.cluster.node_version(NODE) == (whole.uid, whole.resource_version)
    side.label_by_operator()
    assert side.cluster.node_version(NODE) not in (None, (whole.uid, whole.resource_version))
    side.remove_node()
    assert side.cluster.node_version(NODE) is None


def test_the_pods_metadata_are_the_pods_without_their_grace(side: Side) -> None:
    # Given a pod being deleted by someone (its deletion in its metadata), the node cordoned (its replacement
    # goes elsewhere: the lists are of the same pods)
    side.cordon_by_operator()
    side.delete_by_someone("api-1", 20)

    # Then the metadata list says what the whole list says, but each pod's own grace
    whole = sorted(side.cluster.pods_on(NODE), key=lambda p: p.uid)
    assert sorted(side.cluster.pod_metadata_on(NODE), key=lambda p: p.uid) == [
        p.model_copy(update={"grace_period": None}) for p in whole
    ]


def test_an_eviction_in_a_namespace_being_deleted_is_its_own_answer_and_the_pod_stays(side: Side) -> None:
    # Given a namespace being deleted, its pods not deleted yet
    api = named(side, "api-1")
    side.start_deleting_namespace("shop")

    # When one of its pods is evicted, and an event is written on it
    answer = side.cluster.evict(api, 30)
    side.events.on_pod(api, "EvictionRefused", "not written", warning=True)

    # Then the answer says its namespace is being deleted; the pod stays, not being deleted; no event is written
    assert answer.kind is Eviction.NAMESPACE_TERMINATING
    assert "being terminated" in answer.detail
    assert named(side, "api-1").deletion_at is None
    assert side.written() == []
