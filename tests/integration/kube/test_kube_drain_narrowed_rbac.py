"""A whole drain against the sandbox API server's own authorizer, its role narrowed: evictions and deletes are
granted in one namespace only (a RoleBinding there, the ClusterRole without them), as an operator narrows RBAC
to keep a tenant's pods out of reach; and in that namespace a PodDisruptionBudget that can never be satisfied
(minAvailable = replicas). Neither holds the drain past its timeout policy: the refused pods are told and left
to the policy, the blocked ones too, and the force policy ends the drain within its grace and slack, with the
pods it may not delete still there (invariants 2 and 10). Coverage: the refusals here are RBAC's own 403s, not a
webhook's, over the drain's whole course."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import FORCED_POD_SLACK
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import FORCE_GRACE, TIMEOUT, evict_step, run
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents, policy

SEED = {
    "namespaces": ["shop", "tenant"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "deployments": [
        # every replica must stay available: no eviction is ever allowed
        {"name": "web", "namespace": "shop", "replicas": 2, "pdb": {"minAvailable": 2}},
        {"name": "cart", "namespace": "shop", "replicas": 2},
        {"name": "worker", "namespace": "tenant", "replicas": 2},
    ],
}
# The drain's ClusterRole without evictions and deletes; both granted in namespace shop only
NARROWED = """
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: nodecycle-drain}
rules:
  - {apiGroups: [""], resources: [nodes], verbs: [get, list, patch]}
  - {apiGroups: [""], resources: [pods], verbs: [list]}
  - {apiGroups: [""], resources: [events], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: nodecycle-drain-pods, namespace: shop}
rules:
  - {apiGroups: [""], resources: [pods], verbs: [delete]}
  - {apiGroups: [""], resources: [pods/eviction], verbs: [create]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: nodecycle-drain-pods, namespace: shop}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: nodecycle-drain-pods}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: Group, name: nodecycle-drain}
"""


def on_its_way_out(server: KubeServer, namespace: str, name: str) -> bool:
    found = server.get_object("pods", name, namespace)
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


def test_a_drain_refused_one_namespace_by_rbac_with_a_budget_never_satisfied_ends_by_its_force_policy(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node's pods: web (its budget allows no eviction), cart (free to go) and a tenant's worker, which
    # the drain's role may neither evict nor delete
    listed = cluster.pods_on(NODE)
    on_node = {app: [pod for pod in listed if pod.name.startswith(app)] for app in ("web", "cart", "worker")}
    assert all(on_node.values()), f"the test needs each app on the node: {on_node}"
    server.apply(NARROWED)
    start = datetime.now(UTC)
    deadline = start + TIMEOUT
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict_step(
        cluster, NODE, INSTANCE, metrics=metrics, events=events, drain_policy=policy(timeout_policy="force")
    )
    record = draining().model_copy(update={"drain_started_at": start, "drain_deadline": deadline})

    # When the drain polls until its deadline: cart goes, web is blocked, the worker refused, each told
    runs, record = run(step, record, start, deadline - timedelta(seconds=1))
    assert runs[-1][1].again
    assert all(on_its_way_out(server, "shop", pod.name) for pod in on_node["cart"])
    assert not any(on_its_way_out(server, "shop", pod.name) for pod in on_node["web"])
    assert not any(on_its_way_out(server, "tenant", pod.name) for pod in on_node["worker"])
    assert metrics.counts["EvictionsBlockedByPdb"] >= len(on_node["web"])
    refused = {subject for subject, reason, _ in events.written if reason == "EvictionRefused"}
    assert refused == {f"tenant/{pod.name}" for pod in on_node["worker"]} | {NODE}
    assert any('cannot create resource "pods/eviction"' in message for message in events.messages)

    # And from its deadline on, Then the force policy deletes what it may (web), is refused the worker's delete,
    # and ends the drain once its grace and slack are over, with the worker still running
    runs, record = run(step, record, deadline, deadline + timedelta(minutes=10))
    at, last = runs[-1]
    assert (last.then, last.again) == (None, False)
    assert record.outcome == "drain-timeout-forced-incomplete"
    assert at <= deadline + FORCE_GRACE + FORCED_POD_SLACK + timedelta(seconds=5)
    assert all(on_its_way_out(server, "shop", pod.name) for pod in on_node["web"])
    assert not any(on_its_way_out(server, "tenant", pod.name) for pod in on_node["worker"])
    assert {subject for subject, reason, _ in events.written if reason == "DeletionRefused"} >= {
        f"tenant/{pod.name}" for pod in on_node["worker"]
    }
