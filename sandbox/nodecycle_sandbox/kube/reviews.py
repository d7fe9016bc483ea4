"""``authorization.k8s.io/v1``: SelfSubjectAccessReview (what ``kubectl auth can-i`` posts) and
SubjectAccessReview (an administrator asking about anyone), answered by the same RBAC that guards every
request, with the discovery documents of the group."""

from __future__ import annotations

from typing import Any

from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.meta import JsonObj
from nodecycle_sandbox.kube.rbac import AUTHENTICATED, Attributes, Rbac, User

GROUP = "authorization.k8s.io"
VERSION = "v1"
_KINDS = {
    "selfsubjectaccessreviews": "SelfSubjectAccessReview",
    "subjectaccessreviews": "SubjectAccessReview",
}


def is_review_path(segments: list[str]) -> bool:
    return segments[:3] == ["apis", GROUP, VERSION] and len(segments) == 4 and segments[3] in _KINDS


def review(rbac: Rbac, user: User, resource: str, body: Any) -> JsonObj:
    """The review posted to ``resource``, answered (the caller has been authorized to create it)."""
    if not isinstance(body, dict) or not isinstance(body.get("spec"), dict):
        raise errors.bad_request(f"a {_KINDS[resource]} needs a spec")
    spec = body["spec"]
    if resource == "subjectaccessreviews":
        if not spec.get("user") and not spec.get("groups"):
            raise errors.bad_request("spec.user or spec.groups: at least one is required")
        subject = User(str(spec.get("user") or ""), (*(spec.get("groups") or ()), AUTHENTICATED))
    else:
        subject = user
    decision = rbac.authorize(subject, _attributes(spec))
    status: JsonObj = {"allowed": decision.allowed}
    if decision.reason:
        status["reason"] = decision.reason
    return {
        "kind": _KINDS[resource],
        "apiVersion": f"{GROUP}/{VERSION}",
        "metadata": {"creationTimestamp": None},
        "spec": spec,
        "status": status,
    }


def _attributes(spec: JsonObj) -> Attributes:
    resource = spec.get("resourceAttributes")
    if isinstance(resource, dict):
        return Attributes(
            verb=str(resource.get("verb") or ""),
            api_group=str(resource.get("group") or ""),
            resource=str(resource.get("resource") or ""),
            subresource=str(resource.get("subresource") or ""),
            namespace=str(resource.get("namespace") or ""),
            name=str(resource.get("name") or ""),
        )
    path = spec.get("nonResourceAttributes")
    if isinstance(path, dict):
        return Attributes(verb=str(path.get("verb") or ""), path=str(path.get("path") or ""))
    raise errors.bad_request("spec.resourceAttributes or spec.nonResourceAttributes is required")


# -- discovery -------------------------------------------------------------------------------------------


def group_entry() -> JsonObj:
    version = {"groupVersion": f"{GROUP}/{VERSION}", "version": VERSION}
    return {"name": GROUP, "versions": [version], "preferredVersion": version}


def discovery(segments: list[str]) -> JsonObj | None:
    """``/apis/authorization.k8s.io`` and ``/apis/authorization.k8s.io/v1``; None for other paths."""
    if segments == ["apis", GROUP]:
        return {"kind": "APIGroup", "apiVersion": "v1", **group_entry()}
    if segments == ["apis", GROUP, VERSION]:
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{GROUP}/{VERSION}",
            "resources": [
                {
                    "name": name,
                    "singularName": kind.lower(),
                    "namespaced": False,
                    "kind": kind,
                    "verbs": ["create"],
                }
                for name, kind in _KINDS.items()
            ],
        }
    return None
