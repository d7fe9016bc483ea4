"""``authorization.k8s.io/v1``: SelfSubjectAccessReview (what ``kubectl auth can-i`` posts) and
SubjectAccessReview (an administrator asking about anyone), answered by the same RBAC that guards every
request, with the discovery documents of the group."""

from __future__ import annotations

from typing import Any

from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.meta import JsonObj
from nodecycle_sandbox.kube.rbac import Attributes, Rbac, User

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
        # Exactly the subject the spec names: kube-apiserver adds no group (not even system:authenticated;
        # pkg/registry/authorization/util AuthorizationAttributesFrom).
        subject = User(str(spec.get("user") or ""), tuple(str(g) for g in spec.get("groups") or ()))
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


# -- protobuf --------------------------------------------------------------------------------------------
# kubectl posts access reviews as protobuf (``application/vnd.kubernetes.protobuf``): the "k8s\0" magic, a
# runtime.Unknown envelope, then the review. Only the fields of a review are read (k8s.io/api
# authorization/v1 generated.proto); the answer goes back as JSON, which kubectl also accepts.

PROTOBUF = "application/vnd.kubernetes.protobuf"
_MAGIC = b"k8s\x00"
_RESOURCE_FIELDS = {
    1: "namespace",
    2: "verb",
    3: "group",
    4: "version",
    5: "resource",
    6: "subresource",
    7: "name",
}
_NON_RESOURCE_FIELDS = {1: "path", 2: "verb"}


def decode_protobuf(body: bytes) -> JsonObj:
    """A review posted as protobuf, as the JSON object it stands for."""
    if not body.startswith(_MAGIC):
        raise errors.bad_request("a protobuf body must start with the k8s magic number")
    envelope = _fields(body[len(_MAGIC) :])
    raw = next((value for number, value in envelope if number == 2), b"")
    spec: JsonObj = {}
    for number, value in _fields(raw):
        if number != 2:  # 1: metadata, 3: status
            continue
        for field, content in _fields(value):
            if field == 1:
                spec["resourceAttributes"] = _strings(content, _RESOURCE_FIELDS)
            elif field == 2:
                spec["nonResourceAttributes"] = _strings(content, _NON_RESOURCE_FIELDS)
            elif field == 3:
                spec["user"] = content.decode()
            elif field == 4:
                spec.setdefault("groups", []).append(content.decode())
    return {"spec": spec}


def _strings(message: bytes, names: dict[int, str]) -> JsonObj:
    return {names[n]: v.decode() for n, v in _fields(message) if n in names and isinstance(v, bytes)}


def _fields(message: bytes) -> list[tuple[int, Any]]:
    """(field number, value) of a protobuf message: varints as ints, length-delimited fields as bytes."""
    out: list[tuple[int, Any]] = []
    position = 0
    while position < len(message):
        key, position = _varint(message, position)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, position = _varint(message, position)
            out.append((number, value))
        elif wire == 2:
            length, position = _varint(message, position)
            out.append((number, message[position : position + length]))
            position += length
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
        else:
            raise errors.bad_request(f"unsupported protobuf wire type {wire}")
    return out


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise errors.bad_request("truncated protobuf body")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7
