"""A node whose container runtime hangs past its kubelet's PLEG threshold, on the real Kubernetes adapter against the
sandbox API server: the kubelet lives (it renews the node's Lease) and posts the node Ready=False, in its runtime
errors' words ("PLEG is not healthy: ..."), and stops none of the pods deleted there while it lasts. Unlike a NotReady
node whose runtime answers (its network not ready), nothing stops them then: waiting for them past their grace (what a
runtime answering again would give them) only holds the budget slot."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.model import Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import TIMEOUT, evict_step, run
from tests.sandbox.kube.conftest import wait_until
from tests.unit.drain.test_drain_steps import FakeSlots, terminating

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
SEED = {
    "namespaces": ["shop"],
    "nodes": [
        {"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"},
        {"privateIp": "10.0.2.10", "instanceId": "i-0a1b2c3d4e5f60201", "zone": "eu-west-1b"},
    ],
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 4}],
}
# (the kubelet's relistThreshold is 3 min: the node turns NotReady at once here)
SERVER_OPTIONS = {"pleg_threshold_seconds": 0.05}
GRACE = timedelta(seconds=30)  # the seeded pods' terminationGracePeriodSeconds (the default)


def _ready(server: KubeServer) -> dict[str, str]:
    node = server.get_object("nodes", NODE) or {}
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def test_pods_a_hung_runtime_never_stops_are_left_once_the_drain_looks_at_its_not_ready_node(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the node cordoned, its container runtime hung past the PLEG threshold: NotReady in its kubelet's words
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    server.hang_runtime(NODE)
    wait_until(lambda: _ready(server)["status"] == "False", what="the node NotReady")
    assert _ready(server)["message"].startswith("PLEG is not healthy")
    admin.api_client.close()

    # When its drain evicts its pods (their 30 s of grace never used: nothing signals them) and polls at its delays
    start = datetime.now(UTC)
    record = terminating(
        Step.EVICT,
        id=f"{INSTANCE}/terminate/token",
        instance_id=INSTANCE,
        node=NODE,
        drain_started_at=start,
        drain_deadline=start + TIMEOUT,
    )
    step = evict_step(cluster, NODE, INSTANCE, slots=FakeSlots(holders={NODE}, held_for={NODE: record.id}))
    runs, record = run(step, record, start, start + timedelta(seconds=180))

    # Then the drain leaves them once their grace is over (what is owed to them: a runtime that answered again
    # within it would stop them with it), not a minute past their deletion's deadline, holding its slot meanwhile
    ended_at, outcome = runs[-1]
    assert not outcome.again
    assert record.outcome == "drained; 2 pods left terminating (node not ready, its container runtime down)"
    assert ended_at - start <= GRACE + timedelta(seconds=10), ended_at - start
