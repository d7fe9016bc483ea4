"""The limits kube-apiserver puts on what is written, whatever the kind: label keys and values, annotation keys
and their total size (k8s.io/apimachinery ``pkg/api/validation/objectmeta.go``: ``ValidateObjectMetaAccessor``,
``ValidateAnnotations``, ``TotalAnnotationSizeLimitB``; ``pkg/util/validation/validation.go``:
``IsQualifiedName``, ``IsValidLabelValue``), on create, update and patch alike."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer

from .conftest import Kube, nodes_seed, status_of

MERGE_PATCH = "application/merge-patch+json"


@pytest.fixture(autouse=True)
def one_node(server: KubeServer) -> None:
    server.seed({"nodes": nodes_seed(1)})


def _node(kube: Kube) -> str:
    return str(kube.core.list_node().items[0].metadata.name)


def _patch_metadata(kube: Kube, metadata: dict[str, Any]) -> ApiException:
    with pytest.raises(ApiException) as raised:
        kube.core.patch_node(_node(kube), {"metadata": metadata}, _content_type=MERGE_PATCH)
    return raised.value


@pytest.mark.parametrize(
    ("labels", "why"),
    [
        ({"team": "x" * 64}, "must be no more than 63 characters"),
        ({"team": "a b"}, "a valid label must be an empty string or consist of alphanumeric characters"),
        ({"team": "-x"}, "must start and end with an alphanumeric character"),
        ({"k" * 64: "v"}, "name part must be no more than 63 characters"),
        ({"Example.com/team": "v"}, "prefix part a lowercase RFC 1123 subdomain"),
        ({"a/b/c": "v"}, "a qualified name must consist of alphanumeric characters"),
        ({"/team": "v"}, "prefix part must be non-empty"),
    ],
)
def test_a_label_key_or_value_kubernetes_refuses_is_422(kube: Kube, labels: dict[str, str], why: str) -> None:
    error = _patch_metadata(kube, {"labels": labels})
    assert error.status == 422
    assert status_of(error)["details"]["causes"][0]["field"] == "metadata.labels"
    assert why in status_of(error)["message"]


def test_label_values_up_to_63_characters_and_empty_ones_are_accepted(kube: Kube) -> None:
    labels = {"example.com/team": "x" * 63, "empty": "", "Mixed_Case.key": "A-b_c.9"}
    node = kube.core.patch_node(_node(kube), {"metadata": {"labels": labels}}, _content_type=MERGE_PATCH)
    assert labels.items() <= node.metadata.labels.items()


def test_annotation_keys_are_qualified_names_of_any_case(kube: Kube) -> None:
    accepted = {"Example.COM/Reason": "any value at all: spaces, / and ünïcode"}
    node = kube.core.patch_node(
        _node(kube), {"metadata": {"annotations": accepted}}, _content_type=MERGE_PATCH
    )
    assert accepted.items() <= node.metadata.annotations.items()

    error = _patch_metadata(kube, {"annotations": {"not a key": "v"}})
    assert (error.status, status_of(error)["details"]["causes"][0]["field"]) == (422, "metadata.annotations")


def test_annotations_over_256_kib_in_total_are_422_and_counted_in_bytes(kube: Kube) -> None:
    # Given annotations whose keys and values take 256 KiB exactly, two bytes for each "é"
    key, name = "example.com/big", _node(kube)
    taken = sum(
        len(k) + len(v.encode()) for k, v in (kube.core.read_node(name).metadata.annotations or {}).items()
    )
    room = 256 * 1024 - taken - len(key)
    at_limit = {key: "é" * (room // 2) + "a" * (room % 2)}
    kube.core.patch_node(name, {"metadata": {"annotations": at_limit}}, _content_type=MERGE_PATCH)

    # When one byte more is written, Then it is refused as too long, on update as on patch
    error = _patch_metadata(kube, {"annotations": {"x": ""}})
    assert error.status == 422
    assert "metadata.annotations: Too long: must have at most 262144 bytes" in status_of(error)["message"]
    assert [c["reason"] for c in status_of(error)["details"]["causes"]] == ["FieldValueTooLong"]
    node = kube.core.read_node(name)
    node.metadata.annotations["x"] = ""
    with pytest.raises(ApiException) as raised:
        kube.core.replace_node(name, node)
    assert raised.value.status == 422


def test_a_configmap_created_with_an_invalid_label_is_422(kube: Kube) -> None:
    body = {"metadata": {"name": "x", "labels": {"owner": "a" * 100}}, "data": {}}
    with pytest.raises(ApiException) as raised:
        kube.core.create_namespaced_config_map("default", body)
    assert raised.value.status == 422


def test_a_generated_name_keeps_58_characters_of_its_prefix_as_kube_apiserver_does(kube: Kube) -> None:
    # k8s.io/apiserver pkg/storage/names/generate.go (SimpleNameGenerator): an Event about a node of a long
    # (valid) name, named after it, is created with a name of 63 characters
    node = "ip-10-0-1-7." + "a" * 200 + ".compute.internal"
    event = {
        "metadata": {"generateName": f"{node}."},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": "Cordoned",
        "message": "m",
    }
    created = kube.core.create_namespaced_event("default", event)
    assert created.metadata.name.startswith(node[:58])
    assert len(created.metadata.name) == 63


def _config_map_refusal(kube: Kube, data: dict[str, str]) -> ApiException:
    with pytest.raises(ApiException) as raised:
        kube.core.create_namespaced_config_map("default", {"metadata": {"name": "big"}, "data": data})
    return raised.value


def test_a_configmap_counts_its_values_in_bytes_up_to_1_mib_and_not_its_keys(kube: Kube) -> None:
    # ValidateConfigMap (kubernetes pkg/apis/core/validation/validation.go): totalSize += len(value), the bytes
    # of each value, against MaxSecretSize (1 MiB); keys are not counted
    mib = 1024 * 1024
    # (three bytes a character: the client sends each as a 6-byte escape, and the body stays under 3 MiB)
    error = _config_map_refusal(kube, {"k": "€" * (mib // 3 + 1)})  # fewer characters than bytes
    assert error.status == 422
    assert "Too long: must have at most 1048576 bytes" in status_of(error)["message"]
    # field.TooLong's cause, as kube-apiserver gives it: FieldValueTooLong on the whole object ("[]")
    assert status_of(error)["details"]["causes"] == [
        {"reason": "FieldValueTooLong", "message": "Too long: must have at most 1048576 bytes", "field": "[]"}
    ]

    kube.core.create_namespaced_config_map(
        "default", {"metadata": {"name": "full"}, "data": {"k" * 253: "x" * (mib - 1), "a": "x"}}
    )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"data": {"k": "w"}}, "data"),
        ({"data": {"k": "v", "more": "x"}}, "data"),
        ({"binaryData": {"b": "AA=="}}, "binaryData"),
        ({"immutable": False}, "immutable"),
    ],
)
def test_an_immutable_configmap_refuses_a_change_of_its_data_or_of_immutable(
    kube: Kube, change: dict[str, Any], field: str
) -> None:
    # ValidateConfigMapUpdate: once immutable is true, data, binaryData and immutable are Forbidden to change (422);
    # its metadata may change, and it may be deleted (and created again)
    frozen = {"metadata": {"name": "frozen"}, "data": {"k": "v"}, "immutable": True}
    created = kube.core.create_namespaced_config_map("default", frozen)
    body = {**frozen, "metadata": {"name": "frozen", "resourceVersion": created.metadata.resource_version}}
    body.update(change)
    with pytest.raises(ApiException) as raised:
        kube.core.replace_namespaced_config_map("frozen", "default", body)
    assert raised.value.status == 422
    assert status_of(raised.value)["message"] == (
        f'ConfigMap "frozen" is invalid: {field}: Forbidden: field is immutable when `immutable` is set'
    )
    with pytest.raises(ApiException) as patched:
        kube.core.patch_namespaced_config_map("frozen", "default", change)
    assert patched.value.status == 422
    kube.core.patch_namespaced_config_map("frozen", "default", {"metadata": {"labels": {"a": "b"}}})
    assert kube.core.read_namespaced_config_map("frozen", "default").data == {"k": "v"}
    kube.core.delete_namespaced_config_map("frozen", "default")


@pytest.mark.parametrize("key", ["budget/json", "a b", "..x", "k" * 254])
def test_a_configmap_key_kubernetes_refuses_is_422(kube: Kube, key: str) -> None:
    error = _config_map_refusal(kube, {key: "v"})
    assert error.status == 422
    assert f"data[{key}]" in status_of(error)["message"]


def test_a_request_body_over_3_mib_is_413_before_it_is_decoded(kube: Kube) -> None:
    # k8s.io/apiserver pkg/endpoints/handlers/rest.go limitedReadBody, with MaxRequestBodyBytes' default 3 MiB:
    # 413 RequestEntityTooLarge; a body under it is decoded and validated (a ConfigMap over 1 MiB: 422)
    mib = 1024 * 1024
    with pytest.raises(ApiException) as raised:
        kube.core.create_namespaced_config_map(
            "default", {"metadata": {"name": "huge"}, "data": {"k": "x" * 3 * mib}}
        )
    assert (raised.value.status, status_of(raised.value)["reason"]) == (413, "RequestEntityTooLarge")
    assert status_of(raised.value)["message"] == "Request entity too large: limit is 3145728"
    error = _config_map_refusal(kube, {"k": "x" * (3 * mib - 100)})
    assert error.status == 422


NODE = {"apiVersion": "v1", "kind": "Node", "name": "ip-10-0-1-7.eu-west-1.compute.internal"}
POD = {"apiVersion": "v1", "kind": "Pod", "name": "web-1", "namespace": "shop"}


def _event_refusal(kube: Kube, namespace: str, subject: dict[str, str], **fields: Any) -> ApiException | None:
    """The API server's refusal of an Event about ``subject`` in ``namespace``; None when it is created."""
    body = {"metadata": {"generateName": "e."}, "involvedObject": subject, "reason": "Cordoned", **fields}
    try:
        kube.core.create_namespaced_event(namespace, body)
    except ApiException as error:
        return error
    return None


def test_a_core_v1_event_without_event_time_is_in_its_objects_namespace_or_default_for_a_node(
    kube: Kube,
) -> None:
    # kubernetes pkg/apis/core/validation/events.go, legacyValidateEvent: as the kubelet and nodecycle write them
    kube.core.create_namespace({"metadata": {"name": "shop"}})
    assert _event_refusal(kube, "default", NODE) is None
    assert _event_refusal(kube, "shop", POD) is None
    for namespace, subject in (("kube-system", NODE), ("default", POD)):
        error = _event_refusal(kube, namespace, subject)
        assert error is not None
        assert error.status == 422
        assert "involvedObject.namespace" in status_of(error)["message"]


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "reportingComponent"),
        ({"reportingComponent": "not a name"}, "reportingComponent"),
        ({"reportingComponent": "nodecycle"}, "reportingInstance"),
        (
            {"reportingComponent": "nodecycle", "reportingInstance": "x" * 129, "action": "Drain"},
            "reportingInstance",
        ),
        ({"reportingComponent": "nodecycle", "reportingInstance": "stack-a"}, "action"),
        (
            {
                "reportingComponent": "nodecycle",
                "reportingInstance": "stack-a",
                "action": "Drain",
                "message": "m" * 1025,
            },
            "message",
        ),
    ],
)
def test_a_core_v1_event_with_event_time_says_who_reported_what_within_its_limits(
    kube: Kube, fields: dict[str, str], field: str
) -> None:
    error = _event_refusal(kube, "default", NODE, eventTime="2026-12-01T10:00:00.000000Z", **fields)
    assert error is not None
    assert (error.status, status_of(error)["details"]["causes"][0]["field"]) == (422, field)
    complete = {"reportingComponent": "nodecycle", "reportingInstance": "x" * 128, "action": "Drain"}
    assert _event_refusal(kube, "default", NODE, eventTime="2026-12-01T10:00:00.000000Z", **complete) is None
