"""A Deployment whose pods tolerate every taint ({operator: Exists}, as some agents and operators ship), on the real
Kubernetes adapter against the sandbox API server: the scheduler's NodeUnschedulable filter lets such a pod onto a
cordoned node, so each pod the drain evicts is replaced by its ReplicaSet on the draining node itself when no other
node has room (its LeastAllocated score prefers the emptying node too). The drain evicts and waits for the pods that
were on the node at its cordon, as kubectl drain does for those it lists at its start: a replacement created past
the cordon (its unschedulable taint's timeAdded, by more than PLACED_AFTER_MARGIN: both the API server's clock) is
neither evicted nor waited for, only told, and the drain ends as soon as the pod of the cordon is gone. (Before, each
replacement was evicted in turn, and every such drain ran to its timeout and its force policy.) A controller that
binds its pods by spec.nodeName, on a node not cordoned: test_kube_drain_recreated_pods."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.drain.pods import PLACED_AFTER_MARGIN
from nodecycle_sandbox.checks import last_pod_gone
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import TIMEOUT, evict_step
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


SERVER_OPTIONS = {"pod_start_seconds": 0.02, "tick_seconds": 0.02}


def agents(server: KubeServer) -> list[dict[str, object]]:
    return [p for p in server.objects("pods", "ops") if p["spec"].get("nodeName") == NODE]


def test_pods_placed_on_the_node_after_its_cordon_are_neither_evicted_nor_waited_for(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node cordoned, its agent pod (created before the cordon) the only one of its kind, and a drain of it
    # under the force policy
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    server.settle()
    first = {p["metadata"]["uid"] for p in agents(server)}  # type: ignore[index]
    assert len(first) == 1
    start = datetime.now(UTC)
    deadline = start + TIMEOUT
    metrics = FakeMetrics()
    events = KubeEvents(EksCluster("sandbox").api_client, owner="stack-a")
    step = evict_step(
        cluster, NODE, INSTANCE, metrics=metrics, events=events, drain_policy=policy(timeout_policy="force")
    )
    record = draining().model_copy(update={"drain_started_at": start, "drain_deadline": deadline})

    # When the drain polls from its start on, as the clock runs (a second at most between polls), the cluster's
    # controllers and scheduler acting between polls
    seen: set[str] = set()
    at, outcome = start, None
    while at <= start + PLACED_AFTER_MARGIN + timedelta(seconds=30):  # (the drain ends long before)
        outcome = step(record, at)
        record = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            break
        server.settle()
        seen |= {p["metadata"]["uid"] for p in agents(server)}  # type: ignore[index]
        time.sleep(min(outcome.delay, 1.0))
        at = datetime.now(UTC)

    # Then the drain ended drained, once the pod of its cordon was gone, well before its deadline: the replacements
    # created within the margin were evicted and waited for too, those past it not
    assert outcome is not None
    assert (outcome.then, outcome.again) == (None, False)
    assert record.outcome == "drained"
    assert at - start <= PLACED_AFTER_MARGIN + timedelta(seconds=15)
    assert seen - first, "the ReplicaSet's replacement was scheduled back on the cordoned node"
    left = agents(server)
    assert len(left) == 1
    assert left[0]["metadata"]["uid"] not in first  # type: ignore[index]
    # the replacement left on the node: neither evicted nor deleted, and counted and told on the node once
    assert not left[0]["metadata"].get("deletionTimestamp")  # type: ignore[attr-defined]
    # and the sandbox's own check, which the campaign and the benchmarks judge completions by, agrees from the API
    # server's history: every pod the drain answers for (created before the cordon) is gone, the newcomer apart
    assert last_pod_gone(server.history(), NODE) is not None
    assert metrics.counts["PodsEvicted"] >= 1
    assert metrics.counts["PodsPlacedAfterCordon"] == 1
    told = [
        e
        for e in server.objects("events", "default")
        if e.get("reason") == "PodsPlacedAfterCordon" and e["involvedObject"]["name"] == NODE
    ]
    assert len(told) == 1
    assert "ops/" in told[0]["message"]
