"""What the drain's Events cost a step against an API server that fails them or is slow to take them, on the real
adapters and the sandbox API server: each refusal the drain tells of is an Event on the pod and one on its node,
and a pass may tell of many. Events are a courtesy: after one that the API server failed or did not answer in
time, the others are not tried (the step waits out one timeout, not one per event)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.adapters.kube.eks_access import EksCluster
from nodecycle.adapters.kube.events import KubeEvents
from nodecycle.domain.drain.evict import Evict
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.admission import Denial
from tests.integration.kube.cluster import evict_step
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import terminating

NODE = "ip-10-0-1-10.eu-west-1.compute.internal"
INSTANCE = "i-0a1b2c3d4e5f60101"
SEED = {
    "namespaces": ["shop"],
    "nodes": [{"privateIp": "10.0.1.10", "instanceId": INSTANCE, "zone": "eu-west-1a"}],
    "deployments": [{"name": "web", "namespace": "shop", "replicas": 3}],
}
DEADLINE = T0 + timedelta(seconds=600)
# A namespace deleted stays Terminating, its pods running (the namespace controller has not got to it)
SERVER_OPTIONS = {"namespace_controller_lag_seconds": 3600}


def draining() -> LifecycleRecord:
    identity = {"id": f"{INSTANCE}/terminate/token", "instance_id": INSTANCE, "node": NODE}
    return terminating(Step.EVICT, **identity, drain_started_at=T0, drain_deadline=DEADLINE)


def evict(cluster: KubeCluster, metrics: FakeMetrics) -> Evict:
    return evict_step(
        cluster,
        NODE,
        INSTANCE,
        metrics=metrics,
        events=KubeEvents(EksCluster("sandbox").api_client, owner="stack-a"),
    )


@pytest.mark.parametrize(
    "fault",
    [
        Fault("events-fail", "kube-error", "POST events"),
        Fault("events-hang", "kube-slow", "POST events", value=8),  # past the events' read timeout
    ],
    ids=["failing", "hung"],
)
def test_a_pass_telling_of_many_refusals_tries_one_event_when_the_api_server_fails_them(
    cluster: KubeCluster, server: KubeServer, fault: Fault
) -> None:
    # Given a webhook that denies the eviction of each of the node's three pods, and an API server that fails
    # (or does not answer in time) every Event written
    server.admission.deny(
        Denial("guard.example.com", "CREATE", "pods/eviction", "shop", "*", 403, "Forbidden")
    )
    server.faults.arm([fault], seed=1)
    metrics = FakeMetrics()

    # When the drain asks them to leave, telling of each refusal
    outcome = evict(cluster, metrics)(draining(), T0)

    # Then each refusal is counted (the alarm), and one Event only was tried
    assert metrics.counts["EvictionErrors"] == 3
    assert outcome.again
    assert len(server.faults.firings()) == 1


def test_events_on_pods_of_a_namespace_being_deleted_are_asked_of_the_api_server_once(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a namespace being deleted (its controller not there yet: its pods still run), where the API server
    # takes no Event
    with server.api_client() as admin:
        request = admin.param_serialize(
            "DELETE", "/api/v1/namespaces/shop", header_params={}, auth_settings=["BearerToken"]
        )
        assert admin.call_api(*request).status == 200
    events = KubeEvents(EksCluster("sandbox").api_client, owner="stack-a")
    shop = [pod for pod in cluster.pods_on(NODE) if pod.namespace == "shop"]
    assert len(shop) == 3

    # When the drain tells of each of its pods
    server.reset_counters()
    for pod in shop:
        events.on_pod(pod, "EvictionRefused", "refused", warning=True)

    # Then the API server is asked once: its refusal tells for the namespace
    assert server.counters().get(("create", "events"), 0) == 1
