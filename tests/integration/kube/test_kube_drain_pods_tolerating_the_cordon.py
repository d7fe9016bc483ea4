"""A Deployment whose pods tolerate every taint ({operator: Exists}, as some agents and operators ship), on the real
Kubernetes adapter against the sandbox API server: the scheduler's NodeUnschedulable filter lets such a pod onto a
cordoned node, so each pod the drain evicts is replaced by its ReplicaSet on the draining node itself when no other
node has room (its LeastAllocated score prefers the emptying node too). No cordon or taint keeps them off; the drain
evicts each replacement in turn, and its timeout policy ends it on time all the same (invariants 2 and 10), one of
them still there. (A controller that binds its pods by spec.nodeName: test_kube_drain_recreated_pods.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import FORCED_POD_SLACK
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import FORCE_GRACE, TIMEOUT, evict_step
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining
from tests.support.fakes import FakeMetrics
from tests.unit.drain.test_drain_steps import policy

SEED = {
    "namespaces": ["ops"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        # the other node has no room: the draining one is the only place left for a replacement
        {
            "privateIp": "10.0.2.10",
            "instanceId": "i-0a1b2c3d4e5f60201",
            "zone": "eu-west-1b",
            "podsCapacity": 0,
        },
    ],
    "deployments": [
        {
            "name": "agent",
            "namespace": "ops",
            "replicas": 1,
            "template": {
                "metadata": {"labels": {"app": "agent"}},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "agent", "image": "example.com/agent:1"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        }
    ],
}


REPLACEMENTS = 5  # the replacements seen back on the node before the drain is taken to its deadline
SERVER_OPTIONS = {"pod_start_seconds": 0.02, "tick_seconds": 0.02}


def agents(server: KubeServer) -> list[dict[str, object]]:
    return [p for p in server.objects("pods", "ops") if p["spec"].get("nodeName") == NODE]


def test_pods_that_tolerate_the_cordon_come_back_to_the_node_and_the_timeout_policy_ends_the_drain(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node cordoned, its agent pod the only one of its kind, and a drain of it under the force policy
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    server.settle()
    first = {p["metadata"]["uid"] for p in agents(server)}  # type: ignore[index]
    assert len(first) == 1
    start = datetime.now(UTC)
    deadline = start + TIMEOUT
    metrics = FakeMetrics()
    step = evict_step(cluster, NODE, INSTANCE, metrics=metrics, drain_policy=policy(timeout_policy="force"))
    record = draining().model_copy(update={"drain_started_at": start, "drain_deadline": deadline})

    # When the drain polls from its start on, the cluster's controllers and scheduler acting between polls
    seen: set[str] = set()
    at, outcome = start, None
    while at <= deadline + FORCE_GRACE + FORCED_POD_SLACK + timedelta(seconds=60):
        outcome = step(record, at)
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            break
        server.settle()
        seen |= {p["metadata"]["uid"] for p in agents(server)}  # type: ignore[index]
        at += timedelta(seconds=max(outcome.delay, 1))
        if len(seen - first) >= REPLACEMENTS:
            at = max(at, deadline)  # (enough seen: on to the deadline, where nothing else changes)

    # Then each replacement came back to the cordoned node and was asked to leave in turn, and the force policy
    # ended the drain within its grace and slack past the deadline, the latest replacement still on the node
    assert outcome is not None
    assert (outcome.then, outcome.again) == (None, False)
    assert len(seen - first) >= REPLACEMENTS, (
        "the ReplicaSet's replacements were scheduled back on the cordoned node"
    )
    assert metrics.counts["PodsEvicted"] >= REPLACEMENTS
    assert record.outcome in ("drain-timeout-forced-incomplete", "drain-timeout-forced")
    assert at <= deadline + FORCE_GRACE + FORCED_POD_SLACK + timedelta(seconds=10)
    assert agents(server), "a replacement is on the node as the drain ends"
