"""An admission webhook that answers a pod's eviction 429, "not now", on the real Kubernetes adapter against the
sandbox API server: KubeVirt's virt-launcher eviction interceptor does so for the pod of every VM that can live
migrate (``admission webhook "virt-launcher-eviction-interceptor.kubevirt.io" denied the request: Eviction triggered
evacuation of VMI``, then "Evacuation in progress" until the VM has moved and its pod completed), and kube-apiserver
writes the webhook's code as it gave it (webhook errors.ToStatusErr): a Status, no budget named, no Retry-After.
kubectl drain retries that pod after 5 s and evicts the others meanwhile.

That 429 is the pod's answer, not the API server shedding load (API Priority and Fairness answers in plain text
with a Retry-After): the drain asks the node's other pods in the same pass, tells the deferral once on the pod and
on its node, raises no alarm (it is the webhook's design), and asks the pod again at its next polls, until it goes
or the drain's timeout policy acts. Taken for throttling, each pass stopped at that pod: the pods after it were
never asked (nor the other VMs', never told to migrate), and the drain sat out its timeout, its policy forcing them
past their budgets (or leaving them to the instance's end)."""

from __future__ import annotations

from datetime import timedelta

from nodecycle.adapters.kube.cluster_api import KubeCluster
from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.admission import Denial
from tests.integration.kube import test_kube_drain_steps as drain_steps
from tests.integration.kube.cluster import evict_step
from tests.integration.kube.test_kube_drain_steps import INSTANCE, NODE, draining, on_its_way_out, web_pods
from tests.support.fakes import T0, FakeMetrics
from tests.unit.drain.test_drain_steps import FakeEvents

SEED = drain_steps.SEED
INTERCEPTOR = "virt-launcher-eviction-interceptor.kubevirt.io"


def test_a_pod_whose_eviction_a_webhook_defers_with_429_leaves_the_other_pods_evicted_in_the_same_pass(
    cluster: KubeCluster, server: KubeServer
) -> None:
    # Given a webhook that answers the eviction of the first of the node's pods 429, as KubeVirt's does (no reason)
    deferred, *others = web_pods(cluster)
    why = f'Eviction triggered evacuation of VMI "shop/{deferred.name}"'
    server.admission.deny(Denial(INTERCEPTOR, "CREATE", "pods/eviction", "shop", deferred.name, 429, "", why))
    metrics, events = FakeMetrics(), FakeEvents()
    step = evict_step(cluster, NODE, INSTANCE, metrics=metrics, events=events)

    # When the drain asks the pods to leave
    outcome = step(draining(), T0)

    # Then the other pods are evicted in the same pass, the deferred one is not
    assert all(on_its_way_out(server, pod) for pod in others), [p.name for p in others]
    assert not on_its_way_out(server, deferred)
    # And the deferral is told once, on the pod and on its node, in the webhook's words; not as throttling, nor alarmed
    told = [(subject, reason) for subject, reason, _ in events.written]
    assert told == [(f"shop/{deferred.name}", "EvictionDeferred"), (NODE, "EvictionDeferred")], events.written
    assert all(why in message for message in events.messages), events.messages
    assert "EvictionsThrottled" not in metrics.counts
    assert "EvictionErrors" not in metrics.counts
    assert outcome.again
    record = draining().model_copy(update=dict(outcome.changes))

    # When the drain polls again while the webhook still defers it
    again = step(record, T0 + timedelta(seconds=outcome.delay))
    record = record.model_copy(update=dict(again.changes))

    # Then the pod is asked again, and not told again
    assert [denied.name for denied in server.admission.denied()] == [deferred.name, deferred.name]
    assert len(events.written) == 2

    # When the webhook lets it go (its VM moved), Then the next poll evicts it
    server.admission.clear()
    step(record, T0 + timedelta(seconds=outcome.delay + again.delay))
    assert on_its_way_out(server, deferred)
