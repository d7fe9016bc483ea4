"""A validating webhook on evictions whose pods are gone (``failurePolicy: Fail``), on the real Kubernetes adapter
against the sandbox API server: every eviction is answered 500 ``failed calling webhook``, for as long as nobody
fixes it. Each is that pod's failure, asked again at the next poll (a blip passes so), and the drain's timeout
policy ends the drain, its deletes judged by no eviction webhook. But a failure at every try is no blip: it was
counted as a step's retry only, nothing told on the pods and no alarm for the whole drain timeout of every node,
while a cordon failing so is told and alarmed after a poll interval. Now a pod whose evictions have failed at every
try for EVICTION_FAILING_FOR is told once (an EvictionFailing Warning, a few a pass) and counted as an eviction error
(the alarm); a pass still spends at most FAILURES_PER_PASS failing calls."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import EVICTION_FAILING_FOR, FAILURES_PER_PASS
from nodecycle_sandbox.faults import Fault
from nodecycle_sandbox.kube import KubeServer
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import evict_step, run
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining, on_its_way_out, web_pods
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents

SEED = drain_steps.SEED


def test_evictions_a_webhook_fails_at_every_try_are_told_once_per_pod_and_alarmed_after_a_while(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a webhook on evictions that cannot be reached (failurePolicy Fail): every eviction 500
    pods = web_pods(cluster)
    server.faults.arm([Fault("webhook", "kube-webhook-down", "POST pods/eviction")], seed=1)
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict_step(cluster, NODE, INSTANCE, metrics=metrics, events=events)

    # When the drain polls for a while, short of its timeout: first for less than EVICTION_FAILING_FOR
    early, record = run(step, draining(), T0, T0 + EVICTION_FAILING_FOR - timedelta(seconds=1))
    told_early = list(events.written)
    later, record = run(
        step, record, early[-1][0] + timedelta(seconds=early[-1][1].delay), T0 + timedelta(minutes=2)
    )

    # Then nothing has gone, and no pass asked more than FAILURES_PER_PASS pods (each eviction a failure)
    assert not any(on_its_way_out(server, pod) for pod in pods)
    firings = server.faults.firings()
    assert 0 < len(firings) <= FAILURES_PER_PASS * (len(early) + len(later))
    # And a blip is not told; a failure at every try for longer is, once per pod, a Warning, and alarmed
    assert told_early == []
    failing = [(subject, kind) for subject, reason, kind in events.written if reason == "EvictionFailing"]
    on_pods = sorted((f"shop/{pod.name}", "Warning") for pod in pods)
    assert sorted(failing) == sorted([*on_pods, *[(NODE, "Warning")] * len(pods)]), events.written
    assert any("failed calling webhook" in message for message in events.messages), events.messages
    assert metrics.counts["EvictionErrors"] >= 1
    # And it goes on as before: asked again at its polls, until its deadline's timeout policy
    assert record.step is draining().step
    assert later[-1][1].again
