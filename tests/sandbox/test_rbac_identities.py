"""Who the API server judges, as kube-apiserver decides it: the subject of an access review, an impersonated
service account or anonymous user; and what nodecycle's groups can never do (invariant 12: no nodecycle
identity reaches cluster-admin). The sandbox's API server, deploy/rbac.yaml applied, the official client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def server() -> Iterator[KubeServer]:
    with KubeServer(tick_seconds=0.02, pod_start_seconds=0.05) as started:
        started.apply(ROOT / "deploy" / "rbac.yaml")
        started.seed({"namespaces": ["shop"]})
        yield started


def review(server: KubeServer, user: str, groups: list[str], **attributes: str) -> bool:
    """An administrator's SubjectAccessReview: may ``user`` in ``groups`` do it?"""
    api = client.AuthorizationV1Api(server.api_client())
    if "path" in attributes:
        spec = client.V1SubjectAccessReviewSpec(
            user=user, groups=groups, non_resource_attributes=client.V1NonResourceAttributes(**attributes)
        )
    else:
        spec = client.V1SubjectAccessReviewSpec(
            user=user, groups=groups, resource_attributes=client.V1ResourceAttributes(**attributes)
        )
    answer: Any = api.create_subject_access_review(client.V1SubjectAccessReview(spec=spec))
    return bool(answer.status.allowed)


def status(call: Any, *args: Any) -> int:
    try:
        call(*args)
    except ApiException as error:
        return int(error.status)
    return 200


def as_user(server: KubeServer, user: str, *groups: str, key: str | None = None) -> client.ApiClient:
    api = server.api_client(key) if key else server.api_client()
    api.set_default_header("Impersonate-User", user)
    if groups:
        api.set_default_header("Impersonate-Group", ",".join(groups))
    return api


# -- the subject of a SubjectAccessReview ---------------------------------------------------------------------
# kube-apiserver judges exactly the user and groups the spec names (pkg/registry/authorization/util:
# AuthorizationAttributesFrom builds the user from spec.user, spec.groups, spec.extra and nothing else): no
# system:authenticated is added, so the bootstrap roles bound to it (system:discovery, system:basic-user)
# do not answer for a review that does not name the group. The sandbox added it, answering "allowed" for
# subjects the cluster would refuse.


def test_a_review_judges_exactly_the_groups_it_names(server: KubeServer) -> None:
    assert not review(server, "someone", [], verb="get", path="/api")
    assert not review(
        server,
        "someone",
        ["nodecycle-drain"],
        verb="create",
        group="authorization.k8s.io",
        resource="selfsubjectaccessreviews",
    )
    assert review(server, "someone", ["system:authenticated"], verb="get", path="/api")
    assert review(
        server, "someone", ["nodecycle-drain"], verb="create", resource="pods", subresource="eviction"
    )


# -- impersonation -------------------------------------------------------------------------------------------
# k8s.io/apiserver pkg/endpoints/filters/impersonation.go: a user name "system:serviceaccount:<ns>:<name>"
# is impersonated as that service account, which needs the impersonate verb on "serviceaccounts" <name> in
# <ns> (not on "users"), and the impersonated identity gets the groups system:serviceaccounts and
# system:serviceaccounts:<ns>. system:authenticated is added to any impersonated user but
# system:anonymous, who gets system:unauthenticated instead (and no group that says either is doubled).

IMPERSONATOR = "AKIATESTIMPERSONATOR"
IMPERSONATOR_ROLE = "arn:aws:iam::123456789012:role/impersonator"


def impersonator(server: KubeServer, rules: list[dict[str, Any]], namespace: str | None = None) -> None:
    """A role's sessions in group "impersonators", granted ``rules`` (in ``namespace``, or cluster-wide)."""
    server.add_access_entries([AccessEntry(IMPERSONATOR_ROLE, ("impersonators",))])
    server.map_role(IMPERSONATOR, IMPERSONATOR_ROLE, "probe")
    meta = {"name": "impersonate", **({"namespace": namespace} if namespace else {})}
    role_kind, binding_kind = ("Role", "RoleBinding") if namespace else ("ClusterRole", "ClusterRoleBinding")
    group = "rbac.authorization.k8s.io"
    server.apply(
        json.dumps({"apiVersion": f"{group}/v1", "kind": role_kind, "metadata": meta, "rules": rules})
        + "\n---\n"
        + json.dumps(
            {
                "apiVersion": f"{group}/v1",
                "kind": binding_kind,
                "metadata": meta,
                "roleRef": {"apiGroup": group, "kind": role_kind, "name": "impersonate"},
                "subjects": [{"apiGroup": group, "kind": "Group", "name": "impersonators"}],
            }
        )
    )


def pods_for_service_accounts_of_shop(server: KubeServer) -> None:
    group = "rbac.authorization.k8s.io"
    meta = {"name": "sa-pods", "namespace": "shop"}
    server.apply(
        json.dumps(
            {
                "apiVersion": f"{group}/v1",
                "kind": "Role",
                "metadata": meta,
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}],
            }
        )
        + "\n---\n"
        + json.dumps(
            {
                "apiVersion": f"{group}/v1",
                "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {"apiGroup": group, "kind": "Role", "name": "sa-pods"},
                "subjects": [{"apiGroup": group, "kind": "Group", "name": "system:serviceaccounts:shop"}],
            }
        )
    )


SERVICE_ACCOUNT = "system:serviceaccount:shop:web"


def test_impersonating_a_service_account_needs_the_verb_on_serviceaccounts(server: KubeServer) -> None:
    pods_for_service_accounts_of_shop(server)
    # Given a user who may impersonate the *user* of that name only
    impersonator(
        server,
        [
            {
                "apiGroups": [""],
                "resources": ["users"],
                "verbs": ["impersonate"],
                "resourceNames": [SERVICE_ACCOUNT],
            }
        ],
    )
    # Then it may not act as the service account
    pods = client.CoreV1Api(as_user(server, SERVICE_ACCOUNT, key=IMPERSONATOR)).list_namespaced_pod
    with pytest.raises(ApiException) as raised:
        pods("shop")
    assert raised.value.status == 403
    assert 'cannot impersonate resource "serviceaccounts" in API group "" in the namespace "shop"' in str(
        json.loads(raised.value.body or "{}").get("message")
    )


def test_an_impersonated_service_account_has_its_groups(server: KubeServer) -> None:
    pods_for_service_accounts_of_shop(server)
    impersonator(
        server,
        [
            {
                "apiGroups": [""],
                "resources": ["serviceaccounts"],
                "verbs": ["impersonate"],
                "resourceNames": ["web"],
            }
        ],
        namespace="shop",
    )
    pods = client.CoreV1Api(as_user(server, SERVICE_ACCOUNT, key=IMPERSONATOR)).list_namespaced_pod
    assert status(pods, "shop") == 200  # through system:serviceaccounts:shop
    other = client.CoreV1Api(as_user(server, "system:serviceaccount:shop:db", key=IMPERSONATOR))
    assert status(other.list_namespaced_pod, "shop") == 403  # not that one


def test_anonymous_impersonated_is_not_authenticated(server: KubeServer) -> None:
    anonymous = client.ApisApi(as_user(server, "system:anonymous"))
    assert status(anonymous.get_api_versions) == 403  # system:discovery is for system:authenticated only
    version = client.VersionApi(as_user(server, "system:anonymous"))
    assert status(version.get_code) == 200  # system:public-info-viewer is for system:unauthenticated too
    named = client.ApisApi(as_user(server, "someone"))
    assert status(named.get_api_versions) == 200


# -- what no nodecycle identity may ever do --------------------------------------------------------------------
# The ways from a namespace-scoped grant to cluster-admin ("Role Based Access Control Good Practices",
# kubernetes.io/docs/concepts/security/rbac-good-practices: privilege escalation risks): bind and escalate
# and writing RBAC objects, impersonation, reading secrets, running anything in a pod (create pods or
# workloads, exec, attach, port-forward, ephemeral containers), service account tokens, the kubelet API
# through nodes/proxy, certificate approval, admission webhooks, a node's status, and aws-auth on EKS.

ESCALATIONS: list[dict[str, str]] = [
    *(
        {"verb": verb, "group": "rbac.authorization.k8s.io", "resource": resource, "namespace": namespace}
        for resource, namespace in (
            ("roles", "nodecycle"),
            ("rolebindings", "nodecycle"),
            ("rolebindings", "kube-system"),
            ("clusterroles", ""),
            ("clusterrolebindings", ""),
        )
        for verb in ("create", "update", "patch", "bind", "escalate", "delete")
    ),
    *({"verb": "impersonate", "resource": r} for r in ("users", "groups", "serviceaccounts", "uids")),
    *({"verb": v, "resource": "secrets", "namespace": "kube-system"} for v in ("get", "list", "watch")),
    *({"verb": v, "resource": "secrets"} for v in ("get", "list", "watch")),
    {"verb": "create", "resource": "pods", "namespace": "kube-system"},
    *(
        {"verb": "create", "resource": "pods", "subresource": sub, "namespace": "shop"}
        for sub in ("exec", "attach", "portforward")
    ),
    *(
        {"verb": "get", "resource": "pods", "subresource": sub, "namespace": "shop"}
        for sub in ("exec", "attach")
    ),
    {"verb": "patch", "resource": "pods", "subresource": "ephemeralcontainers", "namespace": "shop"},
    {"verb": "update", "resource": "pods", "namespace": "shop"},
    {"verb": "patch", "resource": "pods", "namespace": "shop"},
    *(
        {"verb": "create", "group": "apps", "resource": r, "namespace": "kube-system"}
        for r in ("deployments", "daemonsets", "statefulsets")
    ),
    {"verb": "create", "group": "batch", "resource": "jobs", "namespace": "kube-system"},
    {"verb": "create", "resource": "serviceaccounts", "subresource": "token", "namespace": "kube-system"},
    *({"verb": v, "resource": "nodes", "subresource": "proxy"} for v in ("get", "create")),
    {"verb": "patch", "resource": "nodes", "subresource": "status"},
    {"verb": "create", "resource": "nodes"},
    {"verb": "delete", "resource": "nodes"},
    {
        "verb": "update",
        "group": "certificates.k8s.io",
        "resource": "certificatesigningrequests",
        "subresource": "approval",
    },
    {"verb": "approve", "group": "certificates.k8s.io", "resource": "signers"},
    *(
        {"verb": "create", "group": "admissionregistration.k8s.io", "resource": r}
        for r in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    ),
    *(
        {"verb": v, "resource": "configmaps", "name": "aws-auth", "namespace": "kube-system"}
        for v in ("get", "update", "patch", "create")
    ),
    {"verb": "create", "resource": "configmaps", "namespace": "nodecycle"},
    {"verb": "update", "resource": "configmaps", "name": "other", "namespace": "nodecycle"},
    {"verb": "delete", "resource": "configmaps", "name": "nodecycle-budget", "namespace": "nodecycle"},
    {"verb": "create", "resource": "persistentvolumes"},
    {"verb": "deletecollection", "resource": "pods", "namespace": "shop"},
    {"verb": "*", "group": "*", "resource": "*"},
]


@pytest.mark.parametrize("group", ["nodecycle-drain", "nodecycle-sweeper"])
def test_no_nodecycle_group_can_escalate(server: KubeServer, group: str) -> None:
    groups = [group, "system:authenticated"]
    granted = [a for a in ESCALATIONS if review(server, "fn", groups, **a)]
    assert granted == []
    # (the reviews answer: what the group is for is allowed)
    assert review(server, "fn", groups, verb="patch", resource="nodes", name="n1")
