"""A JSON patch (RFC 6902) the API server cannot apply, answered as kube-apiserver answers it.

kube-apiserver (staging/src/k8s.io/apiserver/pkg/endpoints/handlers/patch.go, ``applyJSPatch``) answers a patch its
library (evanphx/json-patch) cannot apply, a ``test`` that fails among them, with
``errors.NewGenericServerResponse(422, "", schema.GroupResource{}, "", err.Error(), 0, false)``: reason Invalid, the
generic words of a 422, no resource, no name, and no cause (``isUnexpectedResponse`` false), so the library's words
("testing value ... failed") are not sent at all; ``details`` is an empty object (every field of StatusDetails is
``omitempty``). kubectl tells it "The request is invalid: the server rejected our request due to an error in our
request". A patch that is no list of operations does not decode: 400 BadRequest, in the library's words."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer

from .conftest import Kube, nodes_seed, status_of

JSON_PATCH = "application/json-patch+json"

NOT_APPLIED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Failure",
    "message": "the server rejected our request due to an error in our request",
    "reason": "Invalid",
    "details": {},
    "code": 422,
}


@pytest.fixture
def server() -> Iterator[KubeServer]:
    """The sandbox's API server answering a JSON patch not applied as kube-apiserver does."""
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as started:
        yield started


@pytest.fixture
def node(kube: Kube) -> str:
    name = str(nodes_seed(1)[0]["name"])
    kube.core.create_node({"metadata": {"name": name, "labels": {"role": "worker"}}})
    return name


@pytest.mark.parametrize(
    "operations",
    [
        [
            {"op": "test", "path": "/metadata/labels/role", "value": "other"},
            {"op": "remove", "path": "/spec"},
        ],
        [{"op": "test", "path": "/metadata/annotations/absent", "value": "x"}],
        [{"op": "remove", "path": "/metadata/labels/absent"}],
        [{"op": "frobnicate", "path": "/metadata/labels/role"}],
    ],
    ids=["test-failed", "test-of-a-missing-path", "remove-of-a-missing-path", "unknown-operation"],
)
def test_a_json_patch_not_applied_is_kube_apiservers_generic_422_without_the_librarys_words(
    kube: Kube, node: str, operations: list[dict[str, object]]
) -> None:
    with pytest.raises(ApiException) as raised:
        kube.core.patch_node(node, operations, _content_type=JSON_PATCH)
    assert raised.value.status == 422
    assert status_of(raised.value) == NOT_APPLIED
    assert kube.core.read_node(node).metadata.labels == {"role": "worker"}  # (nothing of the patch applied)


def test_a_json_patch_that_is_no_list_of_operations_is_a_bad_request_in_the_librarys_words(
    kube: Kube, server: KubeServer, node: str
) -> None:
    # (sent as is: the official client sends a JSON patch that is no list as a strategic merge patch)
    response = kube.api_client.rest_client.pool_manager.request(
        "PATCH",
        f"{server.url}/api/v1/nodes/{node}",
        body=json.dumps({"op": "test"}),
        headers={"Content-Type": JSON_PATCH, "Authorization": f"Bearer {server.token()}"},
    )
    assert response.status == 400
    assert json.loads(response.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        "reason": "BadRequest",
        "code": 400,
    }
