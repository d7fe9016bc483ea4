"""A PodDisruptionBudget its disruption controller never processes (kube-controller-manager down or stuck, its
edit never observed), on the real Kubernetes adapter against the sandbox API server: every eviction of its pods is
answered 429 'still being processed', Retry-After 10 s, for as long as that lasts. Each is asked again no sooner
(test_kube_drain_budget_retry_after.py), and nothing was told: the 429 of a budget just edited settles within
seconds, and only the budget's lasting answer is told (test_kube_drain_budgets.py). One that lasts the whole drain
timeout is no edit being processed: told once per pod (EvictionBlocked) past EVICTION_FAILING_FOR, and alarmed."""

from __future__ import annotations

from datetime import timedelta

from kubernetes.client import PolicyV1Api

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import EVICTION_FAILING_FOR
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube.cluster import evict_step, run
from tests.integration.kube.test_kube_drain_budget_retry_after import SEED
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining, on_its_way_out
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents

__all__ = ["SEED"]


def test_a_budget_never_processed_is_told_once_per_pod_past_a_while_and_alarmed(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given the web pods' budget edited, and its disruption controller that never observes it
    pods = [pod for pod in cluster.pods_on(NODE) if pod.controller_kind == "ReplicaSet"]
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict_step(cluster, NODE, INSTANCE, metrics=metrics, events=events)
    with server.paused_controllers():
        PolicyV1Api(server.api_client()).patch_namespaced_pod_disruption_budget(
            "web", "shop", {"spec": {"maxUnavailable": 2}}
        )

        # When the drain polls, first for less than EVICTION_FAILING_FOR, then for two minutes
        early, record = run(step, draining(), T0, T0 + EVICTION_FAILING_FOR - timedelta(seconds=1))
        told_early = list(events.written)
        resumed = early[-1][0] + timedelta(seconds=early[-1][1].delay)
        later, record = run(step, record, resumed, T0 + timedelta(minutes=2))

    # Then it polls no sooner than the server's Retry-After, and nothing has gone
    assert pods
    assert all(outcome.delay >= 10 for _, outcome in [*early, *later])
    assert not any(on_its_way_out(server, pod) for pod in pods)
    # And nothing is told while it could be an edit being processed; past that, once per pod, and alarmed
    assert told_early == []
    blocked = [
        message
        for (subject, reason, _), message in zip(events.written, events.messages, strict=True)
        if reason == "EvictionBlocked" and subject.startswith("shop/")
    ]
    assert len(blocked) == len(pods), events.written
    assert all("never processed" in message for message in blocked), blocked
    assert metrics.counts["EvictionErrors"] >= 1
    assert later[-1][1].again
