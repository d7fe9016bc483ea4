"""The API server authenticates each function as its access entry maps it and authorizes it with the RBAC
of deploy/rbac.yaml: what is not granted is a 403 with the real API server's Status; kubectl auth can-i
and access reviews answer from the same rules."""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from nodecycle_sandbox.kube import KubeServer
from nodecycle_sandbox.kube.access import AccessEntry

from .conftest import nodes_seed

Kubectl = Callable[..., subprocess.CompletedProcess[str]]
ROOT = Path(__file__).resolve().parents[3]
ACCOUNT = "123456789012"
KEYS = {"drain": "AKIATESTDRAINFUNC000", "sweeper": "AKIATESTSWEEPERFUNC0", "eip": "AKIATESTEIPFUNCTION0"}


def role(function: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:role/nodecycle-{function.capitalize()}FunctionRole"


def user(function: str) -> str:
    return (
        f"arn:aws:sts::{ACCOUNT}:assumed-role/nodecycle-{function.capitalize()}FunctionRole/"
        f"nodecycle-{function.capitalize()}Function"
    )


@pytest.fixture
def deployed(server: KubeServer) -> KubeServer:
    """deploy/rbac.yaml applied; the access entries of the template (drain, sweeper; none for eip)."""
    server.apply(ROOT / "deploy" / "rbac.yaml")
    server.add_access_entries(
        [
            AccessEntry(role("drain"), ("nodecycle-drain",)),
            AccessEntry(role("sweeper"), ("nodecycle-sweeper",)),
        ]
    )
    for function, key in KEYS.items():
        server.map_role(key, role(function), f"nodecycle-{function.capitalize()}Function")
    server.seed(
        {
            "namespaces": ["shop"],
            "nodes": nodes_seed(1),
            "deployments": [{"name": "web", "namespace": "shop", "replicas": 1}],
        }
    )
    server.settle()
    return server


def core(server: KubeServer, function: str) -> client.CoreV1Api:
    return client.CoreV1Api(server.api_client(KEYS[function]))


def refused(call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as raised:
        call(*args, **kwargs)
    body: dict[str, Any] = json.loads(raised.value.body or "{}")
    body["http"] = raised.value.status
    return body


def allowed(review: Any) -> bool:
    return bool(review.status and review.status.allowed)


def a_pod(server: KubeServer) -> str:
    return str(server.objects("pods", "shop")[0]["metadata"]["name"])


def test_the_sweeper_may_not_evict_a_pod_the_drain_function_may(deployed: KubeServer) -> None:
    pod = a_pod(deployed)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace="shop"))

    denied = refused(core(deployed, "sweeper").create_namespaced_pod_eviction, pod, "shop", eviction)
    assert denied == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'pods "{pod}" is forbidden: User "{user("sweeper")}" cannot create resource '
        '"pods/eviction" in API group "" in the namespace "shop"',
        "reason": "Forbidden",
        "details": {"name": pod, "kind": "pods"},
        "code": 403,
        "http": 403,
    }
    core(deployed, "drain").create_namespaced_pod_eviction(pod, "shop", eviction)


def test_no_function_may_create_a_config_map_in_kube_system(deployed: KubeServer) -> None:
    aws_auth = client.V1ConfigMap(metadata=client.V1ObjectMeta(name="aws-auth"), data={"mapRoles": "[]"})
    for function in ("drain", "sweeper"):
        denied = refused(core(deployed, function).create_namespaced_config_map, "kube-system", aws_auth)
        assert denied["message"] == (
            f'configmaps is forbidden: User "{user(function)}" cannot create resource "configmaps" in API group '
            '"" in the namespace "kube-system"'
        )
        assert (denied["reason"], denied["details"]) == ("Forbidden", {"kind": "configmaps"})
    assert deployed.get_object("configmaps", "aws-auth", "kube-system") is None


def test_the_budget_is_the_only_config_map_they_may_read_and_replace(deployed: KubeServer) -> None:
    drain = core(deployed, "drain")
    budget = drain.read_namespaced_config_map("nodecycle-budget", "nodecycle")
    drain.replace_namespaced_config_map("nodecycle-budget", "nodecycle", budget)
    denied = refused(drain.read_namespaced_config_map, "other", "nodecycle")
    assert (
        'cannot get resource "configmaps" in API group "" in the namespace "nodecycle"' in denied["message"]
    )
    assert refused(drain.list_namespaced_config_map, "nodecycle")["http"] == 403  # resourceNames never lists
    assert refused(drain.delete_namespaced_config_map, "nodecycle-budget", "nodecycle")["http"] == 403


def test_the_sweeper_lists_and_patches_nodes_and_reads_no_pod(deployed: KubeServer) -> None:
    sweeper = core(deployed, "sweeper")
    (node,) = [str(n.metadata.name) for n in sweeper.list_node().items if n.metadata]
    sweeper.patch_node(node, {"metadata": {"annotations": {"x": "y"}}})
    denied = refused(sweeper.list_pod_for_all_namespaces)
    assert denied["message"] == (
        f'pods is forbidden: User "{user("sweeper")}" cannot list resource "pods" in API group "" at the cluster scope'
    )
    assert refused(sweeper.read_node, node)["message"].startswith(f'nodes "{node}" is forbidden')


def test_a_role_without_an_access_entry_is_not_even_authenticated(deployed: KubeServer) -> None:
    denied = refused(core(deployed, "eip").list_node)
    assert (denied["http"], denied["reason"]) == (401, "Unauthorized")


def test_an_aws_auth_mapping_stands_in_for_an_access_entry(server: KubeServer) -> None:
    # Given a cluster in CONFIG_MAP mode: no access entry, the drain role mapped in kube-system/aws-auth
    server.apply(ROOT / "deploy" / "rbac.yaml")
    server.map_role(KEYS["drain"], role("drain"), "nodecycle-DrainFunction")
    mapping = [
        {
            "rolearn": role("drain"),
            "username": "nodecycle-drain:{{SessionName}}",
            "groups": ["nodecycle-drain"],
        }
    ]
    client.CoreV1Api(server.api_client()).create_namespaced_config_map(
        "kube-system",
        client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="aws-auth"), data={"mapRoles": json.dumps(mapping)}
        ),
    )
    server.seed({"nodes": nodes_seed(1)})

    # Then the drain function works with the groups of its mapping, under the mapped user name
    assert core(server, "drain").list_node().items
    denied = refused(core(server, "drain").create_namespaced_config_map, "kube-system", client.V1ConfigMap())
    assert 'User "nodecycle-drain:nodecycle-DrainFunction" cannot create' in denied["message"]


def test_access_reviews_answer_from_the_same_rules(deployed: KubeServer) -> None:
    reviews = client.AuthorizationV1Api(deployed.api_client())
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user="anyone",
            groups=["nodecycle-sweeper"],
            resource_attributes=client.V1ResourceAttributes(verb="patch", resource="nodes", name="n1"),
        )
    )
    assert allowed(reviews.create_subject_access_review(review))
    review.spec.resource_attributes = client.V1ResourceAttributes(
        verb="create", resource="pods", subresource="eviction", namespace="shop"
    )
    assert not allowed(reviews.create_subject_access_review(review))

    # A function may ask about itself, and not about others
    own = client.AuthorizationV1Api(deployed.api_client(KEYS["drain"]))
    mine = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(verb="delete", resource="pods", namespace="shop")
        )
    )
    assert allowed(own.create_self_subject_access_review(mine))
    denied = refused(own.create_subject_access_review, review)
    assert (
        'cannot create resource "subjectaccessreviews" in API group "authorization.k8s.io"'
        in denied["message"]
    )


def test_kubectl_auth_can_i_as_each_group(deployed: KubeServer, kubectl: Kubectl) -> None:
    def can_i(group: str, *args: str) -> str:
        result = kubectl("auth", "can-i", *args, "--as", "someone", "--as-group", group, check=False)
        return result.stdout.strip()

    assert can_i("nodecycle-drain", "create", "pods", "--subresource=eviction", "-n", "shop") == "yes"
    assert can_i("nodecycle-sweeper", "create", "pods", "--subresource=eviction", "-n", "shop") == "no"
    assert can_i("nodecycle-drain", "create", "configmaps", "-n", "kube-system") == "no"
    assert can_i("nodecycle-sweeper", "update", "configmaps/nodecycle-budget", "-n", "nodecycle") == "yes"
    assert can_i("nodecycle-sweeper", "get", "configmaps/aws-auth", "-n", "kube-system") == "no"


def test_only_administrators_may_impersonate(deployed: KubeServer) -> None:
    api = deployed.api_client(KEYS["drain"])
    api.set_default_header("Impersonate-User", "kubernetes-admin")
    api.set_default_header("Impersonate-Group", "system:masters")
    denied = refused(client.CoreV1Api(api).list_namespace)
    assert denied["message"] == (
        f'users "kubernetes-admin" is forbidden: User "{user("drain")}" cannot impersonate resource "users" in '
        'API group "" at the cluster scope'
    )


def test_rbac_objects_are_served_and_a_change_through_the_api_takes_effect_at_once(
    deployed: KubeServer,
) -> None:
    admin = client.RbacAuthorizationV1Api(deployed.api_client())
    # What was applied is read back, as the doctor reads it
    binding: Any = admin.read_cluster_role_binding("nodecycle-drain")
    assert {(s.kind, s.name) for s in binding.subjects} == {("Group", "nodecycle-drain")}
    assert binding.role_ref.name == "nodecycle-drain"
    sweeper = core(deployed, "sweeper")
    assert refused(sweeper.list_namespaced_pod, "shop")["http"] == 403
    # When an administrator grants the sweeper's group pod reads in one namespace
    admin.create_namespaced_role(
        "shop",
        client.V1Role(
            metadata=client.V1ObjectMeta(name="read-pods"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["list"])],
        ),
    )
    admin.create_namespaced_role_binding(
        "shop",
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="sweeper-reads-pods"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="read-pods"),
            subjects=[client.RbacV1Subject(kind="Group", name="nodecycle-sweeper")],
        ),
    )
    # Then it may, there and nowhere else; and when the binding goes, the grant goes with it
    assert len(sweeper.list_namespaced_pod("shop").items) == 1
    assert refused(sweeper.list_namespaced_pod, "nodecycle")["http"] == 403
    admin.delete_namespaced_role_binding("sweeper-reads-pods", "shop")
    assert refused(sweeper.list_namespaced_pod, "shop")["http"] == 403


def test_a_binding_without_a_role_is_refused_as_invalid(deployed: KubeServer) -> None:
    # (the client checks roleRef itself: send the body as kubectl would, unchecked)
    request = urllib.request.Request(
        f"{deployed.url}/apis/rbac.authorization.k8s.io/v1/namespaces/shop/rolebindings",
        data=json.dumps(
            {"metadata": {"name": "broken"}, "subjects": [{"kind": "Group", "name": "x"}]}
        ).encode(),
        headers={"Authorization": f"Bearer {deployed.token()}", "Content-Type": "application/json"},
        method="POST",
    )
    context = ssl.create_default_context(cadata=deployed.ca_pem.decode())
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.urlopen(request, context=context)
    denied = json.loads(raised.value.read())
    denied["http"] = raised.value.code
    assert (denied["http"], denied["reason"]) == (422, "Invalid")
    assert "roleRef: Required value" in denied["message"]
