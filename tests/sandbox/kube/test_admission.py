"""Validating admission webhooks as kube-apiserver applies their answers: a denied write is answered with the
webhook's code and words and leaves nothing done; reads, and writes the webhook does not match, pass."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.admission import Denial

from .conftest import Kube, nodes_seed, pods_of, status_of


def test_a_delete_a_webhook_denies_is_answered_with_its_code_and_words_and_the_pod_stays(
    server: KubeServer, kube: Kube
) -> None:
    # Given two pods, and a webhook that guards the deletion of one of them
    server.seed({"nodes": nodes_seed(2), "deployments": [{"name": "db", "namespace": "shop", "replicas": 2}]})
    server.settle()
    guarded, other = sorted(p["metadata"]["name"] for p in pods_of(server, "shop", "db"))
    server.admission.deny(
        Denial("guard.example.com", "DELETE", "pods", "shop", guarded, code=403, message="not this one")
    )

    # When both are deleted
    with pytest.raises(ApiException) as refused:
        kube.core.delete_namespaced_pod(guarded, "shop")
    kube.core.delete_namespaced_pod(other, "shop")

    # Then the guarded one is refused in the webhook's words and stays; the other is deleted
    assert refused.value.status == 403
    assert status_of(refused.value)["message"] == (
        'admission webhook "guard.example.com" denied the request: not this one'
    )
    assert kube.core.read_namespaced_pod(guarded, "shop").metadata.deletion_timestamp is None
    assert [(d.webhook, d.operation, d.resource, d.name) for d in server.admission.denied()] == [
        ("guard.example.com", "DELETE", "pods", guarded)
    ]


def test_an_eviction_is_a_create_of_its_subresource_not_a_delete_of_the_pod(
    server: KubeServer, kube: Kube
) -> None:
    # Given a pod that takes its grace period to stop (else the kubelet's next tick, 0.02 s after the eviction,
    # removes it and the delete below is a 404 that says nothing of the webhook), and a webhook that denies
    # every delete of pods (and a code below 400: answered as 400)
    server.seed(
        {"nodes": nodes_seed(1), "deployments": [{"name": "web", "namespace": "shop", "replicas": 1}]}
    )
    server.settle()
    server.pod_shutdown_seconds = 60.0
    (name,) = [p["metadata"]["name"] for p in pods_of(server, "shop", "web")]
    server.admission.deny(Denial("no-deletes.example.com", "DELETE", "pods", code=200))

    # When it is evicted, Then the webhook does not judge it (an eviction creates pods/eviction): it is Terminating
    kube.core.create_namespaced_pod_eviction(
        name, "shop", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    )
    assert kube.core.read_namespaced_pod(name, "shop").metadata.deletion_timestamp is not None
    # and a delete it judges is answered 400
    server.admission.deny(Denial("no-evictions.example.com", "CREATE", "pods/eviction"))
    with pytest.raises(ApiException) as refused:
        kube.core.delete_namespaced_pod(name, "shop")
    assert refused.value.status == 400
    # while a read passes, whatever the webhooks
    assert kube.core.list_namespaced_pod("shop").kind == "PodList"


# Where the webhooks answer in kube-apiserver's order: a delete, update or patch reads its object first (404)
# and checks its preconditions (409) before the validating webhooks see it, with the old object
# (registry.Store.Delete, .Update); an eviction's body is checked (400), then the webhooks judge the
# Eviction, and only then is the pod looked up (evictionREST.Create: createValidation before the pod's Get).


def test_a_gone_object_is_not_found_before_any_webhook_judges_its_delete_or_patch(
    server: KubeServer, kube: Kube
) -> None:
    # Given webhooks that deny every delete of pods and every update of nodes
    server.seed({"nodes": nodes_seed(1)})
    server.settle()
    server.admission.deny(Denial("no-deletes.example.com", "DELETE", "pods", code=403))
    server.admission.deny(Denial("no-updates.example.com", "UPDATE", "nodes", code=403))

    # When a pod and a node that are not there are deleted and cordoned
    with pytest.raises(ApiException) as deleted:
        kube.core.delete_namespaced_pod("gone", "default")
    with pytest.raises(ApiException) as patched:
        kube.core.patch_node("gone", {"spec": {"unschedulable": True}})

    # Then both are 404, and no webhook was asked
    assert (deleted.value.status, status_of(deleted.value)["reason"]) == (404, "NotFound")
    assert (patched.value.status, status_of(patched.value)["reason"]) == (404, "NotFound")
    assert server.admission.denied() == []


def test_a_stale_precondition_is_a_conflict_before_any_webhook_judges_the_write(
    server: KubeServer, kube: Kube
) -> None:
    # Given a pod and a node, and webhooks that deny their deletes and updates
    server.seed(
        {"nodes": nodes_seed(1), "deployments": [{"name": "web", "namespace": "shop", "replicas": 1}]}
    )
    server.settle()
    (pod,) = pods_of(server, "shop", "web")
    node = kube.core.list_node().items[0]
    server.admission.deny(Denial("no-deletes.example.com", "DELETE", "pods", code=403))
    server.admission.deny(Denial("no-updates.example.com", "UPDATE", "nodes", code=403))

    # When the pod is deleted with a uid that is not its own, and the node patched at a resourceVersion it has left
    with pytest.raises(ApiException) as deleted:
        kube.core.delete_namespaced_pod(
            pod["metadata"]["name"], "shop", body={"preconditions": {"uid": "not-its-uid"}}
        )
    stale = str(int(node.metadata.resource_version) - 1)
    with pytest.raises(ApiException) as patched:
        kube.core.patch_node(
            node.metadata.name, {"metadata": {"resourceVersion": stale}, "spec": {"unschedulable": True}}
        )

    # Then both are 409 conflicts, and no webhook was asked
    assert [deleted.value.status, patched.value.status] == [409, 409]
    assert server.admission.denied() == []


def test_a_webhook_refusing_evictions_answers_for_a_gone_pod_but_after_the_body_is_checked(
    server: KubeServer, kube: Kube
) -> None:
    # Given a webhook that denies every eviction
    server.admission.deny(
        Denial("no-evictions.example.com", "CREATE", "pods/eviction", code=403, message="not now")
    )

    # When a pod that is not there is evicted
    with pytest.raises(ApiException) as gone:
        kube.core.create_namespaced_pod_eviction(
            "gone", "default", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "gone"}}
        )
    # and an eviction names another pod than its URL
    with pytest.raises(ApiException) as mismatched:
        kube.core.create_namespaced_pod_eviction(
            "gone", "default", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "other"}}
        )

    # Then the gone pod gets the webhook's refusal, not a 404: the webhook judges before the pod is looked up
    assert gone.value.status == 403
    assert status_of(gone.value)["message"].startswith('admission webhook "no-evictions.example.com"')
    # while the mismatched body is refused as such, before any webhook
    assert mismatched.value.status == 400
    assert status_of(mismatched.value)["message"] == "name in URL does not match name in Eviction object"
    assert [d.name for d in server.admission.denied()] == ["gone"]
