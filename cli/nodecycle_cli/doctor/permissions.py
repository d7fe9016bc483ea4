"""What each function that talks to the cluster must be allowed to do there, and a SubjectAccessReview of it.

The list follows the calls of ``nodecycle.adapters.kube`` (a test compares it with ``deploy/rbac.yaml``). The
doctor asks the API server itself (``authorization.k8s.io/v1`` SubjectAccessReview) whether the identity the
function's access entry gives it (its username and groups) may make each call, so what answers is the
cluster's whole authorizer chain (RBAC, and EKS access policies), not a reading of the RBAC objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

BUDGET_NAME = "nodecycle-budget"


@dataclass(frozen=True)
class Need:
    verb: str
    resource: str
    subresource: str = ""
    namespaced: bool = False  # in the budget's namespace
    name: str = ""
    why: str = ""
    group: str = ""  # the API group ("": core)
    namespace: str = ""  # a namespace of its own, whatever the budget's (kube-node-lease)

    def describe(self, namespace: str) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        what = f"{what}.{self.group}" if self.group else what
        where = f" {self.name}" if self.name else ""
        scope = f" in {self.scope(namespace)}" if self.scope(namespace) else ""
        return f"{self.verb} {what}{where}{scope}"

    def scope(self, namespace: str) -> str | None:
        """The namespace of the call, given the budget's (None: cluster-wide)."""
        return self.namespace or (namespace if self.namespaced else None)


_BUDGET = (
    Need("get", "configmaps", namespaced=True, name=BUDGET_NAME, why="read the disruption budget"),
    Need("update", "configmaps", namespaced=True, name=BUDGET_NAME, why="take and release budget slots"),
)

NEEDS: dict[str, tuple[Need, ...]] = {
    "drain": (
        Need("get", "nodes", why="read the node of a lifecycle"),
        Need("list", "nodes", why="find a node by its instance"),
        Need("patch", "nodes", why="cordon and annotate, then clear the annotations"),
        Need("list", "pods", why="the pods of the node (a field selector)"),
        Need("create", "pods", subresource="eviction", why="evict under PodDisruptionBudgets"),
        Need("delete", "pods", why="the force timeout policy"),
        Need("create", "events", namespaced=True, why="tell each decision on the node (best effort)"),
        Need(
            "get",
            "leases",
            group="coordination.k8s.io",
            namespace="kube-node-lease",
            why="the readiness gate, and the watches that lift a cordon after a reboot, tell a running kubelet "
            "from a node still Ready from before its instance stopped (without it, Ready alone tells)",
        ),
        *_BUDGET,
    ),
    "sweeper": (
        Need("list", "nodes", why="nodes this stack left annotated; nodes still there"),
        Need("patch", "nodes", why="clear leftover annotations"),
        *_BUDGET,
    ),
}


@dataclass(frozen=True)
class Identity:
    """Who a function is in the cluster: what its access entry maps its role to."""

    function: str
    username: str
    groups: tuple[str, ...]


class ReviewUnavailable(Exception):
    """The API server cannot answer SubjectAccessReviews (not served, or the caller may not create them)."""


def denied(api_client: Any, identity: Identity, needs: Sequence[Need], namespace: str) -> list[Need]:
    """The needs the API server refuses to ``identity``; ReviewUnavailable when it cannot be asked."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    authorization = client.AuthorizationV1Api(api_client)
    refused = []
    for need in needs:
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=identity.username,
                # what the EKS authenticator adds to every authenticated identity
                groups=[*identity.groups, "system:authenticated"],
                resource_attributes=client.V1ResourceAttributes(
                    group=need.group,
                    verb=need.verb,
                    resource=need.resource,
                    subresource=need.subresource or None,
                    namespace=need.scope(namespace),
                    name=need.name or None,
                ),
            )
        )
        try:
            answer = authorization.create_subject_access_review(review)
        except ApiException as error:
            if error.status == 404:  # a POST to a path that is not served
                raise ReviewUnavailable(
                    "the API server does not serve SubjectAccessReview (authorization.k8s.io/v1)"
                ) from None
            if error.status == 403:
                raise ReviewUnavailable(
                    "you may not create SubjectAccessReviews (create on subjectaccessreviews, "
                    "authorization.k8s.io): run the doctor as a cluster administrator"
                ) from None
            raise
        if not (answer.status and answer.status.allowed):
            refused.append(need)
    return refused
