"""Discovery documents (unaggregated: kubectl falls back to them when the server ignores the aggregated
``apidiscovery.k8s.io`` media type) and /version."""

from __future__ import annotations

from nodecycle_sandbox.kube.meta import JsonObj
from nodecycle_sandbox.kube.resources import EVICTION_GROUP_VERSION, PODS, ResourceType, groups

KUBERNETES_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-eks-sandbox",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.4",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_VERBS = ["create", "delete", "get", "list", "patch", "update"]


def version() -> JsonObj:
    return dict(KUBERNETES_VERSION)


def api_versions(server_address: str) -> JsonObj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    }


def _group(name: str, version: str) -> JsonObj:
    gv = {"groupVersion": f"{name}/{version}", "version": version}
    return {"name": name, "versions": [gv], "preferredVersion": gv}


def api_group_list() -> JsonObj:
    named = [_group(name, types[0].version) for name, types in groups().items() if name]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": named}


def api_group(name: str) -> JsonObj | None:
    types = groups().get(name)
    if not name or not types:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, types[0].version)}


def _resource(rt: ResourceType) -> JsonObj:
    entry: JsonObj = {
        "name": rt.plural,
        "singularName": rt.singular,
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": list(_VERBS),
    }
    if rt.short_names:
        entry["shortNames"] = list(rt.short_names)
    if rt.categories:
        entry["categories"] = list(rt.categories)
    return entry


def _status_subresource(rt: ResourceType) -> JsonObj:
    return {
        "name": f"{rt.plural}/status",
        "singularName": "",
        "namespaced": rt.namespaced,
        "kind": rt.kind,
        "verbs": ["get", "patch", "update"],
    }


def api_resource_list(group: str, version: str) -> JsonObj | None:
    types = [rt for rt in groups().get(group, []) if rt.version == version]
    if not types:
        return None
    resources: list[JsonObj] = []
    for rt in types:
        resources.append(_resource(rt))
        if rt.has_status:
            resources.append(_status_subresource(rt))
        if rt is PODS:
            # kubectl drain reads group and version of this entry to pick the Eviction API it posts.
            eviction_group, eviction_version = EVICTION_GROUP_VERSION
            resources.append(
                {
                    "name": "pods/eviction",
                    "singularName": "",
                    "namespaced": True,
                    "group": eviction_group,
                    "version": eviction_version,
                    "kind": "Eviction",
                    "verbs": ["create"],
                }
            )
    group_version = f"{group}/{version}" if group else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }


# --- OpenAPI v3 -------------------------------------------------------------------------------------
# Only as much as kubectl's "does the server validate fields?" probe needs: per group/version, a PATCH
# operation per kind that declares the fieldValidation query parameter. kubectl then leaves validation to
# the server (which the sandbox does not do strictly) instead of downloading schemas for client-side checks.


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3_index() -> JsonObj:
    paths = {}
    for group, types in groups().items():
        path = _gv_path(group, types[0].version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash=sandbox"}
    return {"paths": paths}


def openapi_v3_group_version(path: str) -> JsonObj | None:
    types = next((t for g, t in groups().items() if _gv_path(g, t[0].version) == path), None)
    if types is None:
        return None
    operations = {}
    for rt in types:
        url = (
            f"/{path}/namespaces/{{namespace}}/{rt.plural}/{{name}}"
            if rt.namespaced
            else f"/{path}/{rt.plural}/{{name}}"
        )
        operations[url] = {
            "patch": {
                "operationId": f"patch{rt.kind}",
                "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "OK"}},
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": {
                    "group": rt.group,
                    "version": rt.version,
                    "kind": rt.kind,
                },
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (nodecycle sandbox)", "version": KUBERNETES_VERSION["gitVersion"]},
        "paths": operations,
        "components": {"schemas": {}},
    }
