"""A node whose container runtime hangs past its kubelet's PLEG threshold (Ready=False, "PLEG is not healthy: pleg
was last seen active ..."), then answers again: a containerd restarted by systemd, a relist that was only slow. Its
kubelet, which skipped every pod sync meanwhile, then stops the pods deleted there, each with its grace. The drain
waits for them until their grace is over: left at its first look at the node (as on a node whose kubelet is gone),
the instance's end cut the graceful stop that the recovered runtime gave them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client import CoreV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import CHECK_NODE_AFTER
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import TIMEOUT, drain_cluster, drain_server, evict_step, run
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
RECOVERS_AFTER = CHECK_NODE_AFTER + timedelta(seconds=5)  # (within the pods' 30 s of grace)


@pytest.fixture
def kube() -> Iterator[tuple[KubeServer, KubeCluster]]:
    with drain_server(SEED, pleg_threshold_seconds=0.05) as server, drain_cluster(server) as cluster:
        yield server, cluster


def _ready(server: KubeServer) -> dict[str, str]:
    node = server.get_object("nodes", NODE) or {}
    return next(c for c in node["status"]["conditions"] if c["type"] == "Ready")


def _deleting(server: KubeServer) -> list[str]:
    """The pods of the node being deleted and not gone yet."""
    return [
        pod["metadata"]["name"]
        for pod in server.objects("pods", "shop")
        if pod["spec"].get("nodeName") == NODE and pod["metadata"].get("deletionTimestamp")
    ]


def test_a_drain_does_not_complete_under_pods_a_recovering_runtime_still_stops_within_their_grace(
    kube: tuple[KubeServer, KubeCluster],
) -> None:
    server, cluster = kube
    admin = CoreV1Api(server.api_client())
    admin.patch_node(NODE, {"spec": {"unschedulable": True}})
    admin.api_client.close()
    server.hang_runtime(NODE)
    wait_until(lambda: _ready(server)["status"] == "False", what="the node NotReady")

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
    recovered: list[datetime] = []

    def step_then_recover(current: LifecycleRecord, at: datetime) -> Any:
        # the runtime answers again RECOVERS_AFTER the evictions (the step's clock): its kubelet stops the pods
        if not recovered and at - start >= RECOVERS_AFTER:
            server.hang_runtime(NODE, hung=False)
            recovered.append(at)
            # (the kubelet stops them on the wall clock while the step's clock jumps by its delays: wait for its
            # stops before the next look, or a loaded machine lets the step's clock pass their deadline first)
            wait_until(
                lambda: not _deleting(server), timeout=30, what="the recovered kubelet to stop the pods"
            )
        return step(current, at)

    runs, record = run(step_then_recover, record, start, start + timedelta(seconds=180))

    ended_at, outcome = runs[-1]
    assert not outcome.again
    assert record.outcome == "drained", (record.outcome, ended_at - start)
