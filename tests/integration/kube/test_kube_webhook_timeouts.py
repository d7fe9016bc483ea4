"""A validating admission webhook on evictions that does not answer (its pods overloaded or gone, a network policy in
the way), on the sandbox API server, which waits its timeoutSeconds for it as kube-apiserver does: under
``failurePolicy: Fail`` the eviction is answered 500 ``failed calling webhook ... context deadline exceeded`` that
late, nothing done; under ``Ignore`` the pod is evicted that late. First the fake itself (it answered at once, or not
at all: a webhook was a decision, never a wait), then the drain against it, on the real Kubernetes adapter: each
unanswered eviction is that pod's failure (retried at the next poll), the pass stops after FAILURES_PER_PASS of them
(a pass of many pods is not many webhook timeouts long), and the timeout policy's deletes, which no eviction webhook
judges, end the drain at its deadline."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes.client import CoreV1Api, V1Eviction, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle.domain.drain.evict import FAILURES_PER_PASS
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.admission import Unanswered
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.test_kube_drain_steps import DEADLINE, draining, evict, on_its_way_out, web_pods
from tests.support.fakes import T0, FakeMetrics

SEED = {**drain_steps.SEED, "deployments": [{"name": "web", "namespace": "shop", "replicas": 10}]}
WEBHOOK = "kyverno-svc.kyverno.svc"
TIMEOUT = 0.3  # (the webhook's timeoutSeconds, short for the test: kube-apiserver's default is 10)


def eviction(name: str) -> V1Eviction:
    return V1Eviction(
        api_version="policy/v1", kind="Eviction", metadata=V1ObjectMeta(name=name, namespace="shop")
    )


def test_the_fake_waits_for_a_webhook_that_does_not_answer_and_fails_the_eviction_under_fail(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a webhook on evictions in shop that never answers, failurePolicy Fail
    pod = web_pods(cluster)[0]
    server.admission.leave_unanswered(Unanswered(WEBHOOK, "CREATE", "pods/eviction", "shop", seconds=TIMEOUT))

    # When a pod is evicted
    began = time.monotonic()
    with pytest.raises(ApiException) as failed:
        CoreV1Api(server.api_client()).create_namespaced_pod_eviction(pod.name, "shop", eviction(pod.name))

    # Then the answer comes after the webhook's timeout: 500 in kube-apiserver's words, the pod left alone
    assert time.monotonic() - began >= TIMEOUT
    assert failed.value.status == 500
    assert json.loads(str(failed.value.body))["message"] == (
        f'Internal error occurred: failed calling webhook "{WEBHOOK}": failed to call webhook: Post '
        f'"https://{WEBHOOK}:443/validate?timeout={TIMEOUT:g}s": context deadline exceeded'
    )
    assert not on_its_way_out(server, pod)


def test_the_fake_evicts_late_under_a_webhook_that_does_not_answer_with_failure_policy_ignore(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a webhook on evictions in shop that never answers, failurePolicy Ignore
    pod = web_pods(cluster)[0]
    server.admission.leave_unanswered(
        Unanswered(WEBHOOK, "CREATE", "pods/eviction", "shop", seconds=TIMEOUT, failure_policy="Ignore")
    )

    # When a pod is evicted, Then it is, after the webhook's timeout; reads are not held up
    began = time.monotonic()
    CoreV1Api(server.api_client()).create_namespaced_pod_eviction(pod.name, "shop", eviction(pod.name))
    assert time.monotonic() - began >= TIMEOUT
    assert on_its_way_out(server, pod)
    began = time.monotonic()
    CoreV1Api(server.api_client()).read_namespaced_pod(web_pods(cluster)[1].name, "shop")
    assert time.monotonic() - began < TIMEOUT


def test_a_drain_whose_evictions_a_webhook_leaves_unanswered_spends_few_timeouts_a_pass_and_forces_at_its_deadline(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a webhook on every eviction in shop that never answers, failurePolicy Fail
    pods = web_pods(cluster)
    assert len(pods) > FAILURES_PER_PASS, "the test needs more pods than a pass's failures"
    server.admission.leave_unanswered(Unanswered(WEBHOOK, "CREATE", "pods/eviction", "shop", seconds=TIMEOUT))
    metrics = FakeMetrics()
    step = evict(cluster, metrics)

    # When the drain asks the pods to leave, at its first poll and at its deadline
    began = time.monotonic()
    first = step(draining(), T0)
    spent = time.monotonic() - began
    untouched = not any(on_its_way_out(server, pod) for pod in pods)
    record = draining().model_copy(update=dict(first.changes))
    forced = step(record, DEADLINE)

    # Then its first pass is not raised: it asks FAILURES_PER_PASS pods (each that pod's failure, a retry) and
    # stops, a pass of all of them would have waited out every pod's timeout; nothing has gone
    assert first.again
    assert metrics.counts["StepRetries[step=evict]"] == FAILURES_PER_PASS
    assert spent < (FAILURES_PER_PASS + 1) * TIMEOUT + 2
    assert len(server.admission.denied()) == FAILURES_PER_PASS
    assert untouched
    # And at its deadline the timeout policy (force, the unit tests' policy) deletes them: no eviction webhook
    # judges a delete
    assert forced.again
    assert forced.changes.get("forced_at") == DEADLINE
    server.settle()
    assert all(on_its_way_out(server, pod) for pod in pods)
