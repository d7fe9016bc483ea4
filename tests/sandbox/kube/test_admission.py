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
    # Given a pod, and a webhook that denies every delete of pods (and a code below 400: answered as 400)
    server.seed(
        {"nodes": nodes_seed(1), "deployments": [{"name": "web", "namespace": "shop", "replicas": 1}]}
    )
    server.settle()
    (name,) = [p["metadata"]["name"] for p in pods_of(server, "shop", "web")]
    server.admission.deny(Denial("no-deletes.example.com", "DELETE", "pods", code=200))

    # When it is evicted, Then the webhook does not judge it (an eviction creates pods/eviction)
    kube.core.create_namespaced_pod_eviction(
        name, "shop", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name}}
    )
    # and a delete it judges is answered 400
    server.admission.deny(Denial("no-evictions.example.com", "CREATE", "pods/eviction"))
    with pytest.raises(ApiException) as refused:
        kube.core.delete_namespaced_pod(name, "shop")
    assert refused.value.status == 400
    # while a read passes, whatever the webhooks
    assert kube.core.list_namespaced_pod("shop").kind == "PodList"
