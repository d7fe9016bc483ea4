"""A namespace-wide PodDisruptionBudget (an empty selector, {}: in policy/v1 every pod of its namespace) beside the
apps' own, on the real Kubernetes adapter against the sandbox API server, which judges evictions as kube-apiserver
has since 1.29 (kubernetes#119732): the pods of an app with a budget of its own are selected by two budgets, and
their every eviction is refused by a Status of code 500, "This pod has more than one PodDisruptionBudget", which
kube-apiserver (and the sandbox) answers with HTTP 201 Created; the pods of an app without one are guarded by the
namespace's budget alone. The usual way a pod comes under two budgets: a platform team's catch-all budget per
namespace, the app's chart its own. (Read by its HTTP status alone, that refusal was taken for an eviction: the web
pods were counted evicted at every poll, and never told refused.)

The drain respects both (nothing goes that a budget keeps), tells each refused pod once on the pod and on its node
(the runbook's Eviction errors: "its refusal told once by an event on the pod and on the node"), counts the alarm,
and at its timeout its policy ends it within the force grace and its slack (invariant 10)."""

from __future__ import annotations

from datetime import timedelta

from kubernetes.client import (
    CoreV1Api,
    PolicyV1Api,
    V1LabelSelector,
    V1ObjectMeta,
    V1PodDisruptionBudget,
    V1PodDisruptionBudgetSpec,
)

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle_sandbox.chaos.invariants import SLOT_MARGIN
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import FORCE_GRACE, evict_step, run
from tests.integration.kube.forced_drain import forced_past_its_timeout
from tests.integration.kube.test_kube_drain_steps import DEADLINE, INSTANCE, NODE, draining, on_its_way_out
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents

SEED = {
    **drain_steps.SEED,
    "deployments": [
        {"name": "web", "namespace": "shop", "replicas": 4, "pdb": {"maxUnavailable": 1}},
        {"name": "cart", "namespace": "shop", "replicas": 4},
    ],
}
TWO_BUDGETS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)


def test_pods_under_their_own_budget_and_a_namespace_wide_one_are_told_refused_once_and_forced_at_the_timeout(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node cordoned, and a budget of the whole namespace that lets no pod go (minAvailable 100%), beside
    # web's own
    CoreV1Api(server.api_client()).patch_node(NODE, {"spec": {"unschedulable": True}})
    everything = V1LabelSelector()  # (sent as {})
    PolicyV1Api(server.api_client()).create_namespaced_pod_disruption_budget(
        "shop",
        V1PodDisruptionBudget(
            metadata=V1ObjectMeta(name="all"),
            spec=V1PodDisruptionBudgetSpec(min_available="100%", selector=everything),
        ),
    )
    server.settle()
    pods = [pod for pod in cluster.pods_on(NODE) if pod.namespace == "shop"]
    web = [pod for pod in pods if pod.name.startswith("web-")]
    cart = [pod for pod in pods if pod.name.startswith("cart-")]
    assert web, "the test needs web pods on the node"
    assert cart, "the test needs cart pods on the node"
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict_step(cluster, NODE, INSTANCE, metrics=metrics, events=events)

    # When the drain polls until just before its timeout
    before, record = run(step, draining(), T0, DEADLINE - timedelta(seconds=1))

    # Then no pod of shop has gone: web's are refused (two budgets), cart's blocked by the namespace's budget
    assert not any(on_its_way_out(server, pod) for pod in pods)
    assert all(outcome.again for _, outcome in before)
    # And each web pod's refusal is told once, on the pod and on its node, in the server's words, and alarmed
    told = [
        (subject, message)
        for (subject, reason, kind), message in zip(events.written, events.messages, strict=True)
        if reason == "EvictionRefused" and kind == "Warning"
    ]
    on_pods = sorted(subject for subject, _ in told if subject.startswith("shop/"))
    assert on_pods == sorted(f"shop/{pod.name}" for pod in web), events.written
    assert [subject for subject, _ in told].count(NODE) == len(web)
    assert all(TWO_BUDGETS in message for _, message in told), told
    assert metrics.counts["EvictionErrors"] >= len(web)
    # And cart's pods are told blocked by the namespace's budget, as any budget's
    blocked = sorted(subject for subject, reason, _ in events.written if reason == "EvictionBlocked")
    assert [subject for subject in blocked if subject.startswith("shop/")] == sorted(
        f"shop/{pod.name}" for pod in cart
    )

    # When the drain reaches its timeout (polled on the API server's clock, which times the force's deletions)
    record, deadline, ended_at = forced_past_its_timeout(
        cluster, server, timeout=timedelta(seconds=10), horizon=timedelta(seconds=120)
    )

    # Then the timeout policy (force) deletes the pods no budget let go, and the drain ends within its timeout, the
    # force grace and invariant 10's margin
    assert ended_at is not None
    assert ended_at <= deadline + FORCE_GRACE + timedelta(seconds=SLOT_MARGIN), ended_at - deadline
    assert str(record.outcome).startswith("drain-timeout-forced"), record.outcome
    assert all(on_its_way_out(server, pod) for pod in pods)
