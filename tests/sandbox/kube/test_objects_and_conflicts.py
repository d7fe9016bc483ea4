"""CRUD semantics of the API: Status errors, resourceVersion concurrency, patches, generation, subresources."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import SHUTDOWN_ANNOTATION, START_ANNOTATION, KubeServer

from .conftest import Kube, nodes_seed, status_of


def _configmap(name: str, data: dict[str, str], namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def _error(call: Any, *args: Any, **kwargs: Any) -> ApiException:
    with pytest.raises(ApiException) as raised:
        call(*args, **kwargs)
    return raised.value


def test_configmap_round_trip_create_get_replace_delete(kube: Kube) -> None:
    created = kube.core.create_namespaced_config_map("default", _configmap("budget", {"holders": "[]"}))
    assert created.metadata.uid
    assert created.metadata.creation_timestamp is not None
    fetched = kube.core.read_namespaced_config_map("budget", "default")
    fetched.data["holders"] = '["node-a"]'
    replaced = kube.core.replace_namespaced_config_map("budget", "default", fetched)
    assert replaced.data == {"holders": '["node-a"]'}
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    deleted = kube.core.delete_namespaced_config_map("budget", "default")
    # kubernetes 37 returns the Status of a delete as a plain dict
    assert (deleted["status"], deleted["details"]["name"], deleted["details"]["uid"]) == (
        "Success",
        "budget",
        created.metadata.uid,
    )
    assert _error(kube.core.read_namespaced_config_map, "budget", "default").status == 404


def test_missing_object_is_404_with_a_full_status_body(kube: Kube) -> None:
    error = _error(kube.apps.read_namespaced_deployment, "ghost", "default")
    assert status_of(error) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'deployments.apps "ghost" not found',
        "reason": "NotFound",
        "details": {"name": "ghost", "group": "apps", "kind": "deployments"},
        "code": 404,
    }


def test_duplicate_create_is_409_already_exists(kube: Kube) -> None:
    kube.core.create_namespaced_config_map("default", _configmap("once", {}))
    error = _error(kube.core.create_namespaced_config_map, "default", _configmap("once", {}))
    body = status_of(error)
    assert (error.status, body["reason"], body["message"]) == (
        409,
        "AlreadyExists",
        'configmaps "once" already exists',
    )


def test_replace_with_a_stale_resource_version_is_409_conflict(kube: Kube) -> None:
    # Given two writers that read the same version of the budget ConfigMap
    kube.core.create_namespaced_config_map("default", _configmap("budget", {"n": "0"}))
    first = kube.core.read_namespaced_config_map("budget", "default")
    second = kube.core.read_namespaced_config_map("budget", "default")
    # When the first replaces it
    first.data["n"] = "1"
    kube.core.replace_namespaced_config_map("budget", "default", first)
    # Then the second's replace, carrying the old resourceVersion, is refused
    second.data["n"] = "2"
    error = _error(kube.core.replace_namespaced_config_map, "budget", "default", second)
    assert (error.status, status_of(error)["reason"]) == (409, "Conflict")
    assert "the object has been modified" in status_of(error)["message"]
    assert kube.core.read_namespaced_config_map("budget", "default").data == {"n": "1"}


def test_merge_patch_carrying_resource_version_is_checked_like_a_precondition(kube: Kube) -> None:
    node_seed = nodes_seed(1)[0]
    kube.core.create_node({"metadata": {"name": node_seed["name"]}})
    version = kube.core.read_node(node_seed["name"]).metadata.resource_version
    annotate = {"metadata": {"resourceVersion": version, "annotations": {"nodecycle.io/owner": "stack-a"}}}
    kube.core.patch_node(node_seed["name"], annotate, _content_type="application/merge-patch+json")
    # The same patch again: its resourceVersion is now stale.
    error = _error(
        kube.core.patch_node, node_seed["name"], annotate, _content_type="application/merge-patch+json"
    )
    assert (error.status, status_of(error)["reason"]) == (409, "Conflict")
    # Without a resourceVersion a merge patch is unconditional.
    unconditional = {"metadata": {"annotations": {"nodecycle.io/owner": None}}}
    patched = kube.core.patch_node(
        node_seed["name"], unconditional, _content_type="application/merge-patch+json"
    )
    assert patched.metadata.annotations is None


def test_resource_versions_come_from_one_counter_across_kinds(kube: Kube) -> None:
    versions = [
        kube.core.create_namespaced_config_map("default", _configmap("a", {})).metadata.resource_version,
        kube.core.create_namespace({"metadata": {"name": "team"}}).metadata.resource_version,
        kube.coordination.create_namespaced_lease(
            "team", {"metadata": {"name": "l"}}
        ).metadata.resource_version,
        kube.core.create_namespaced_config_map("team", _configmap("b", {}, "team")).metadata.resource_version,
    ]
    numbers = [int(v) for v in versions]
    assert numbers == sorted(numbers)
    assert len(set(numbers)) == 4
    listed = int(kube.core.list_config_map_for_all_namespaces().metadata.resource_version)
    assert listed >= numbers[-1]


def _deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "x"}]},
            },
        },
    }


def test_generation_counts_spec_changes_only(kube: Kube) -> None:
    created = kube.apps.create_namespaced_deployment("default", _deployment("web"))
    assert created.metadata.generation == 1
    relabelled = kube.apps.patch_namespaced_deployment(
        "web", "default", {"metadata": {"labels": {"team": "a"}}}
    )
    assert relabelled.metadata.generation == 1
    scaled = kube.apps.patch_namespaced_deployment("web", "default", {"spec": {"replicas": 3}})
    assert scaled.metadata.generation == 2


def test_a_patch_that_changes_nothing_keeps_the_resource_version(kube: Kube) -> None:
    kube.core.create_namespaced_config_map("default", _configmap("same", {"k": "v"}))
    before = kube.core.read_namespaced_config_map("same", "default").metadata.resource_version
    after = kube.core.patch_namespaced_config_map(
        "same", "default", {"data": {"k": "v"}}
    ).metadata.resource_version
    assert after == before


def test_strategic_merge_patch_merges_conditions_by_type_and_null_deletes(
    server: KubeServer, kube: Kube
) -> None:
    server.seed({"nodes": nodes_seed(1)})
    name = nodes_seed(1)[0]["name"]
    # (a kubelet posts the pressure conditions beside Ready, all False on a healthy node)
    pressure = {"type": "MemoryPressure", "status": "True", "reason": "KubeletHasInsufficientMemory"}
    kube.core.patch_node_status(name, {"status": {"conditions": [pressure]}})
    conditions = {c.type: c.status for c in kube.core.read_node(name).status.conditions}
    assert conditions == {
        "Ready": "True",
        "MemoryPressure": "True",
        "DiskPressure": "False",
        "PIDPressure": "False",
    }
    kube.core.patch_node(name, {"spec": {"unschedulable": True}})
    assert kube.core.read_node(name).spec.unschedulable is True
    kube.core.patch_node(name, {"spec": {"unschedulable": None}})
    assert kube.core.read_node(name).spec.unschedulable is None


def test_strategic_merge_patch_merges_containers_by_name_and_honours_delete_directive(kube: Kube) -> None:
    body = _deployment("api")
    body["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "proxy:1"})
    kube.apps.create_namespaced_deployment("default", body)
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "c", "image": "x:2"}, {"name": "sidecar", "$patch": "delete"}]
                }
            }
        }
    }
    patched = kube.apps.patch_namespaced_deployment("api", "default", patch)
    assert [(c.name, c.image) for c in patched.spec.template.spec.containers] == [("c", "x:2")]


def test_json_patch_applies_operations_and_a_failed_test_is_422(kube: Kube) -> None:
    kube.core.create_namespaced_config_map("default", _configmap("ops", {"a": "1", "b": "2"}))
    operations = [
        {"op": "test", "path": "/data/a", "value": "1"},
        {"op": "replace", "path": "/data/a", "value": "10"},
        {"op": "add", "path": "/data/c", "value": "3"},
        {"op": "remove", "path": "/data/b"},
        {"op": "copy", "from": "/data/c", "path": "/data/d"},
        # (a "/" in a key is escaped "~1": in a label's key, since a ConfigMap's keys may have none)
        {"op": "add", "path": "/metadata/labels", "value": {}},
        {"op": "move", "from": "/data/d", "path": "/metadata/labels/example.com~1e"},
    ]
    patched = kube.core.patch_namespaced_config_map("ops", "default", operations)
    assert patched.data == {"a": "10", "c": "3"}
    assert patched.metadata.labels == {"example.com/e": "3"}
    error = _error(
        kube.core.patch_namespaced_config_map,
        "ops",
        "default",
        [{"op": "test", "path": "/data/a", "value": "1"}],
    )
    assert (error.status, status_of(error)["reason"]) == (422, "Invalid")


def test_create_in_a_missing_namespace_is_404(kube: Kube) -> None:
    error = _error(kube.core.create_namespaced_config_map, "nowhere", _configmap("x", {}, "nowhere"))
    assert (error.status, status_of(error)["message"]) == (404, 'namespaces "nowhere" not found')


def test_invalid_names_and_mismatched_namespaces_are_rejected(kube: Kube) -> None:
    assert (
        _error(kube.core.create_namespaced_config_map, "default", _configmap("Not_Valid", {})).status == 422
    )
    mismatched = _error(kube.core.create_namespaced_config_map, "default", _configmap("x", {}, "kube-system"))
    assert (mismatched.status, status_of(mismatched)["reason"]) == (400, "BadRequest")


def test_generate_name_gives_distinct_names(kube: Kube) -> None:
    body = {"metadata": {"generateName": "lock-"}, "data": {}}
    names = {kube.core.create_namespaced_config_map("default", body).metadata.name for _ in range(5)}
    assert len(names) == 5
    assert all(n.startswith("lock-") and len(n) == len("lock-") + 5 for n in names)


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


def test_pod_status_belongs_to_the_status_subresource(kube: Kube) -> None:
    created = kube.core.create_namespaced_pod("default", {**_pod("p"), "status": {"phase": "Succeeded"}})
    assert created.status.phase == "Pending"
    ignored = kube.core.patch_namespaced_pod("p", "default", {"status": {"phase": "Failed"}})
    assert ignored.status.phase == "Pending"
    finished = kube.core.patch_namespaced_pod_status("p", "default", {"status": {"phase": "Succeeded"}})
    assert finished.status.phase == "Succeeded"
    assert [
        p.metadata.name
        for p in kube.core.list_namespaced_pod("default", field_selector="status.phase=Succeeded").items
    ] == ["p"]


def test_pod_spec_changes_other_than_images_are_422(kube: Kube) -> None:
    kube.core.create_namespaced_pod("default", _pod("p"))
    image = kube.core.patch_namespaced_pod(
        "p", "default", {"spec": {"containers": [{"name": "c", "image": "x:2"}]}}
    )
    assert image.spec.containers[0].image == "x:2"
    error = _error(kube.core.patch_namespaced_pod, "p", "default", {"spec": {"nodeName": "elsewhere"}})
    assert (error.status, status_of(error)["reason"]) == (422, "Invalid")


def test_sandbox_timing_annotation_that_is_not_seconds_is_422(kube: Kube) -> None:
    pod = _pod("typo")
    pod["metadata"]["annotations"] = {SHUTDOWN_ANNOTATION: "2s"}
    error = _error(kube.core.create_namespaced_pod, "default", pod)
    assert (error.status, status_of(error)["reason"]) == (422, "Invalid")
    body = _deployment("typo")
    body["spec"]["template"]["metadata"]["annotations"] = {START_ANNOTATION: "soon"}
    assert _error(kube.apps.create_namespaced_deployment, "default", body).status == 422


def test_workload_whose_selector_misses_its_template_labels_is_422(kube: Kube) -> None:
    body = _deployment("web")
    body["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    error = _error(kube.apps.create_namespaced_deployment, "default", body)
    assert error.status == 422
    assert "selector" in status_of(error)["message"]


def test_deleting_a_namespace_deletes_what_it_holds(kube: Kube, server: KubeServer) -> None:
    kube.core.create_namespace({"metadata": {"name": "team"}})
    kube.core.create_namespaced_config_map("team", _configmap("x", {}, "team"))
    kube.core.create_namespaced_pod("team", _pod("p"))
    kube.core.delete_namespace("team")
    assert server.objects("configmaps", "team") == []
    assert server.objects("pods", "team") == []
    assert _error(kube.core.read_namespace, "team").status == 404


def test_lease_can_be_taken_over_only_from_its_current_version(kube: Kube) -> None:
    lease = {"metadata": {"name": "drain-lock"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    kube.coordination.create_namespaced_lease("default", lease)
    current = kube.coordination.read_namespaced_lease("drain-lock", "default")
    current.spec.holder_identity = "b"
    taken = kube.coordination.replace_namespaced_lease("drain-lock", "default", current)
    assert taken.spec.holder_identity == "b"
    current.spec.holder_identity = "c"  # still carries the version "b" replaced
    assert _error(kube.coordination.replace_namespaced_lease, "drain-lock", "default", current).status == 409


def test_a_replace_naming_another_uid_is_409_even_without_a_resource_version(kube: Kube) -> None:
    # Given a ConfigMap read, then deleted and created again under its name (another uid)
    kube.core.create_namespaced_config_map("default", _configmap("again", {"n": "0"}))
    read = kube.core.read_namespaced_config_map("again", "default")
    kube.core.delete_namespaced_config_map("again", "default")
    kube.core.create_namespaced_config_map("default", _configmap("again", {"n": "1"}))
    # When the copy read is put back without its resourceVersion (an unconditional replace), still naming its uid
    read.metadata.resource_version = None
    read.data["n"] = "2"
    error = _error(kube.core.replace_namespaced_config_map, "again", "default", read)
    # Then the uid is a precondition of the replace (DefaultUpdatedObjectInfo.Preconditions): 409, the new object kept
    assert (error.status, status_of(error)["reason"]) == (409, "Conflict")
    now = kube.core.read_namespaced_config_map("again", "default")
    assert status_of(error)["message"] == (
        'Operation cannot be fulfilled on configmaps "again": Precondition failed: UID in precondition: '
        f"{read.metadata.uid}, UID in object meta: {now.metadata.uid}"
    )
    assert now.data == {"n": "1"}


def test_a_patch_that_changes_the_uid_is_422_field_is_immutable(kube: Kube) -> None:
    kube.core.create_namespaced_config_map("default", _configmap("fixed", {"n": "0"}))
    uid = "0b1c0d2e-0000-4000-8000-000000000000"
    error = _error(
        kube.core.patch_namespaced_config_map,
        "fixed",
        "default",
        {"metadata": {"uid": uid}},
        _content_type="application/merge-patch+json",
    )
    assert (error.status, status_of(error)["reason"]) == (422, "Invalid")
    assert f'metadata.uid: Invalid value: "{uid}": field is immutable' in status_of(error)["message"]
