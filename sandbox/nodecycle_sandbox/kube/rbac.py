"""RBAC as the API server's authorizer applies it: Roles, ClusterRoles and their bindings, loaded from
manifests (``deploy/rbac.yaml``), plus the bootstrap policy every cluster has (``system:masters`` may do
anything; every authenticated user may read discovery and review its own access).

A request is allowed when some binding that names the user, one of its groups, or its service account
grants a rule matching the verb, the API group, the resource (``pods/eviction`` for a subresource, ``*``
and ``*/eviction`` as wildcards), the name (``resourceNames``: never a create or a list) and, for a Role or
a RoleBinding, the namespace. Anything else is denied with the message the real API server writes.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

RBAC_GROUP = "rbac.authorization.k8s.io"
MASTERS = "system:masters"
AUTHENTICATED = "system:authenticated"
UNAUTHENTICATED = "system:unauthenticated"
_RBAC_KINDS = frozenset({"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"})
# The bootstrap roles (plugin/pkg/auth/authorizer/rbac/bootstrappolicy): system:public-info-viewer, bound to
# system:authenticated and system:unauthenticated; system:discovery and system:basic-user, bound to
# system:authenticated only.
_PUBLIC_INFO_PATHS: tuple[str, ...] = ("/healthz", "/livez", "/readyz", "/version", "/version/")
_DISCOVERY_PATHS: tuple[str, ...] = (
    *("/api", "/api/*", "/apis", "/apis/*", "/openapi", "/openapi/*"),
    *_PUBLIC_INFO_PATHS,
)
_SELF_REVIEWS = frozenset({"selfsubjectaccessreviews", "selfsubjectrulesreviews"})


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()

    def subjects(self) -> set[tuple[str, str]]:
        return {("User", self.name)} | {("Group", g) for g in self.groups} | _service_account(self.name)


@dataclass(frozen=True)
class Attributes:
    """What a request asks, as the authorizer sees it."""

    verb: str
    api_group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    path: str = ""  # non-resource requests only

    @property
    def is_resource(self) -> bool:
        return bool(self.resource)


@dataclass(frozen=True)
class Rule:
    verbs: frozenset[str]
    api_groups: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    resource_names: frozenset[str] = frozenset()
    non_resource_urls: frozenset[str] = frozenset()

    def allows(self, attributes: Attributes) -> bool:
        if not ("*" in self.verbs or attributes.verb in self.verbs):
            return False
        if not attributes.is_resource:
            return any(_path_matches(url, attributes.path) for url in self.non_resource_urls)
        if not ("*" in self.api_groups or attributes.api_group in self.api_groups):
            return False
        if not _resource_matches(self.resources, attributes.resource, attributes.subresource):
            return False
        return not self.resource_names or attributes.name in self.resource_names


@dataclass(frozen=True)
class Binding:
    kind: str  # RoleBinding or ClusterRoleBinding
    name: str
    namespace: str  # "" for a ClusterRoleBinding
    role_kind: str  # Role or ClusterRole
    role_name: str
    subjects: frozenset[
        tuple[str, str]
    ]  # (kind, name); service accounts as ("User", "system:serviceaccount:ns:n")


@dataclass
class Decision:
    allowed: bool
    reason: str = ""


@dataclass
class Rbac:
    """The cluster's RBAC objects, loaded from manifests; safe to read from many request threads."""

    roles: dict[tuple[str, str], tuple[Rule, ...]] = field(default_factory=dict)
    cluster_roles: dict[str, tuple[Rule, ...]] = field(default_factory=dict)
    bindings: list[Binding] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def replace(self, documents: Iterable[Mapping[str, Any]]) -> None:
        """Forget every object and load ``documents``: what the cluster's stored RBAC objects now say."""
        with self._lock:
            self.roles, self.cluster_roles, self.bindings = {}, {}, []
        self.load(documents)

    def load(self, documents: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """Apply the RBAC objects among ``documents`` (replacing objects of the same name); return the
        others, for the caller to create through the API."""
        others = []
        with self._lock:
            for document in documents:
                kind = document.get("kind")
                if kind not in _RBAC_KINDS:
                    others.append(document)
                    continue
                meta = document.get("metadata") or {}
                name, namespace = str(meta["name"]), str(meta.get("namespace") or "")
                if kind == "Role":
                    self.roles[(namespace or "default", name)] = _rules(document)
                elif kind == "ClusterRole":
                    self.cluster_roles[name] = _rules(document)
                else:
                    binding = _binding(document, kind, name, namespace)
                    self.bindings = [
                        b
                        for b in self.bindings
                        if (b.kind, b.namespace, b.name) != (kind, binding.namespace, name)
                    ] + [binding]
        return others

    def authorize(self, user: User, attributes: Attributes) -> Decision:
        if MASTERS in user.groups:
            return Decision(True, f'allowed by the group "{MASTERS}"')
        if AUTHENTICATED in user.groups and _bootstrap_allows(attributes):
            return Decision(True, "allowed by the bootstrap policy")
        if UNAUTHENTICATED in user.groups and _public_info_allows(attributes):
            return Decision(True, "allowed by the bootstrap policy")
        subjects = user.subjects()
        with self._lock:
            bindings = list(self.bindings)
            for binding in bindings:
                if not (binding.subjects & subjects):
                    continue
                if binding.namespace and binding.namespace != attributes.namespace:
                    continue
                for rule in self._rules_of(binding):
                    if rule.allows(attributes):
                        return Decision(True, _granted_by(binding))
        return Decision(False)

    def _rules_of(self, binding: Binding) -> tuple[Rule, ...]:
        if binding.role_kind == "ClusterRole":
            return self.cluster_roles.get(binding.role_name, ())
        return self.roles.get((binding.namespace, binding.role_name), ())


def forbidden_message(user: User, attributes: Attributes) -> tuple[str, dict[str, Any]]:
    """The API server's 403 message and Status details for a denied request."""
    if not attributes.is_resource:
        return f'forbidden: User "{user.name}" cannot {attributes.verb} path "{attributes.path}"', {}
    resource = attributes.resource
    if attributes.subresource:
        resource += "/" + attributes.subresource
    where = f'in the namespace "{attributes.namespace}"' if attributes.namespace else "at the cluster scope"
    why = (
        f'User "{user.name}" cannot {attributes.verb} resource "{resource}" in API group '
        f'"{attributes.api_group}" {where}'
    )
    qualified = (
        f"{attributes.resource}.{attributes.api_group}" if attributes.api_group else attributes.resource
    )
    subject = f'{qualified} "{attributes.name}"' if attributes.name else qualified
    details: dict[str, Any] = {"kind": attributes.resource}
    if attributes.name:
        details["name"] = attributes.name
    if attributes.api_group:
        details["group"] = attributes.api_group
    return f"{subject} is forbidden: {why}", details


def _bootstrap_allows(attributes: Attributes) -> bool:
    if not attributes.is_resource:
        return attributes.verb == "get" and any(_path_matches(p, attributes.path) for p in _DISCOVERY_PATHS)
    return (
        attributes.verb == "create"
        and attributes.api_group == "authorization.k8s.io"
        and attributes.resource in _SELF_REVIEWS
    )


def _public_info_allows(attributes: Attributes) -> bool:
    return (
        not attributes.is_resource
        and attributes.verb == "get"
        and any(_path_matches(p, attributes.path) for p in _PUBLIC_INFO_PATHS)
    )


def _resource_matches(allowed: frozenset[str], resource: str, subresource: str) -> bool:
    wanted = f"{resource}/{subresource}" if subresource else resource
    return "*" in allowed or wanted in allowed or (bool(subresource) and f"*/{subresource}" in allowed)


def _path_matches(pattern: str, path: str) -> bool:
    if pattern.endswith("*"):
        return path.startswith(pattern[:-1])
    return path == pattern


def invalid(document: Mapping[str, Any]) -> str | None:
    """Why the API server would refuse this RBAC object (field path: message), or None."""
    kind = document.get("kind")
    if kind in {"RoleBinding", "ClusterRoleBinding"}:
        ref = document.get("roleRef")
        if not isinstance(ref, dict) or not ref.get("kind") or not ref.get("name"):
            return "roleRef: Required value"
        if ref["kind"] not in {"Role", "ClusterRole"} or (
            kind == "ClusterRoleBinding" and ref["kind"] == "Role"
        ):
            return f"roleRef.kind: Unsupported value: {ref['kind']!r}"
        for i, subject in enumerate(document.get("subjects") or ()):
            if not isinstance(subject, dict) or not subject.get("kind") or not subject.get("name"):
                return f"subjects[{i}]: Required value: kind and name"
        return None
    if document.get("aggregationRule"):
        return "aggregationRule: Unsupported value: aggregated ClusterRoles are not served by the sandbox"
    for i, rule in enumerate(document.get("rules") or ()):
        if not isinstance(rule, dict) or not rule.get("verbs"):
            return f"rules[{i}].verbs: Required value"
        if not rule.get("nonResourceURLs") and not rule.get("apiGroups"):
            return f"rules[{i}].apiGroups: Required value"
    return None


def _rules(document: Mapping[str, Any]) -> tuple[Rule, ...]:
    if document.get("aggregationRule"):
        raise ValueError(f"{document['metadata']['name']}: aggregated ClusterRoles are not supported")
    return tuple(
        Rule(
            verbs=frozenset(rule.get("verbs") or ()),
            api_groups=frozenset(rule.get("apiGroups") or ()),
            resources=frozenset(rule.get("resources") or ()),
            resource_names=frozenset(rule.get("resourceNames") or ()),
            non_resource_urls=frozenset(rule.get("nonResourceURLs") or ()),
        )
        for rule in document.get("rules") or ()
    )


def _binding(document: Mapping[str, Any], kind: str, name: str, namespace: str) -> Binding:
    ref = document["roleRef"]
    if kind == "ClusterRoleBinding":
        namespace = ""
    elif not namespace:
        namespace = "default"
    subjects = set()
    for subject in document.get("subjects") or ():
        if subject["kind"] == "ServiceAccount":
            sa_namespace = subject.get("namespace") or namespace
            subjects.add(("User", f"system:serviceaccount:{sa_namespace}:{subject['name']}"))
        else:
            subjects.add((str(subject["kind"]), str(subject["name"])))
    return Binding(kind, name, namespace, str(ref["kind"]), str(ref["name"]), frozenset(subjects))


def _granted_by(binding: Binding) -> str:
    where = f' in namespace "{binding.namespace}"' if binding.namespace else ""
    return f'RBAC: allowed by {binding.kind} "{binding.name}{where}" of {binding.role_kind} "{binding.role_name}"'


def _service_account(name: str) -> set[tuple[str, str]]:
    return {("User", name)} if name.startswith("system:serviceaccount:") else set()
