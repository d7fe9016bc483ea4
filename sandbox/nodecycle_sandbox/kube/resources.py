"""The resource types the sandbox serves: what discovery announces and what routing, tables and the store key on."""

from __future__ import annotations

from dataclasses import dataclass

# Field selectors a real API server accepts beyond metadata.name / metadata.namespace, per resource.
# Boolean fields compare as "true"/"false" and default to "false" when unset, like the server's field sets.
_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
BOOLEAN_FIELDS = frozenset({"spec.unschedulable", "spec.hostNetwork"})


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    has_status: bool = False  # a /status subresource: writes to the main resource keep the stored status
    extra_fields: tuple[str, ...] = ()
    # metadata.generation counts spec changes (what a controller's status.observedGeneration refers to).
    tracks_generation: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``pods`` or ``deployments.apps``: how error messages and the store name a resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def selectable_fields(self) -> frozenset[str]:
        base = {"metadata.name"} | ({"metadata.namespace"} if self.namespaced else set())
        return frozenset(base | set(self.extra_fields))


PODS = ResourceType("", "v1", "pods", "Pod", True, ("po",), ("all",), True, _POD_FIELDS)
NODES = ResourceType("", "v1", "nodes", "Node", False, ("no",), (), True, ("spec.unschedulable",))
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False, ("ns",), (), True, ("status.phase",))
CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True, ("cm",))
DEPLOYMENTS = ResourceType(
    "apps", "v1", "deployments", "Deployment", True, ("deploy",), ("all",), True, tracks_generation=True
)
REPLICASETS = ResourceType(
    "apps", "v1", "replicasets", "ReplicaSet", True, ("rs",), ("all",), True, tracks_generation=True
)
DAEMONSETS = ResourceType(
    "apps", "v1", "daemonsets", "DaemonSet", True, ("ds",), ("all",), True, tracks_generation=True
)
PDBS = ResourceType(
    "policy",
    "v1",
    "poddisruptionbudgets",
    "PodDisruptionBudget",
    True,
    ("pdb",),
    (),
    True,
    tracks_generation=True,
)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True)
# core/v1 Events, with the field selectors `kubectl describe` and `kubectl get events --for` send
EVENTS = ResourceType(
    "",
    "v1",
    "events",
    "Event",
    True,
    ("ev",),
    (),
    False,
    (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
)

# RBAC objects are stored and served like any other; the authorizer is rebuilt from them on every write.
_RBAC = "rbac.authorization.k8s.io"
ROLES = ResourceType(_RBAC, "v1", "roles", "Role", True)
ROLEBINDINGS = ResourceType(_RBAC, "v1", "rolebindings", "RoleBinding", True)
CLUSTERROLES = ResourceType(_RBAC, "v1", "clusterroles", "ClusterRole", False)
CLUSTERROLEBINDINGS = ResourceType(_RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False)
RBAC_TYPES = (ROLES, ROLEBINDINGS, CLUSTERROLES, CLUSTERROLEBINDINGS)

ALL: tuple[ResourceType, ...] = (
    PODS,
    NODES,
    NAMESPACES,
    CONFIGMAPS,
    DEPLOYMENTS,
    REPLICASETS,
    DAEMONSETS,
    PDBS,
    LEASES,
    EVENTS,
    *RBAC_TYPES,
)

# Subresources announced in discovery and served by the router. kubectl drain looks for "pods/eviction"
# with kind Eviction and a group/version to decide which Eviction API version to post.
EVICTION_GROUP_VERSION = ("policy", "v1")
# The Eviction body versions the eviction endpoint accepts (v1beta1 is still sent by older clients).
EVICTION_API_VERSIONS = frozenset({"policy/v1", "policy/v1beta1"})

_BY_PATH = {(rt.group, rt.version, rt.plural): rt for rt in ALL}


def by_path(group: str, version: str, plural: str) -> ResourceType | None:
    return _BY_PATH.get((group, version, plural))


def by_name(name: str) -> ResourceType:
    """Resolve ``Pod``, ``pods``, ``pod``, ``po`` or ``deployments.apps`` to a resource type."""
    wanted = name.lower()
    for rt in ALL:
        if wanted in {rt.plural, rt.singular, rt.qualified, *rt.short_names}:
            return rt
    raise KeyError(f"unknown resource {name!r}; known: {', '.join(rt.plural for rt in ALL)}")


def groups() -> dict[str, list[ResourceType]]:
    """Resource types by group, core ("") first, in announcement order."""
    out: dict[str, list[ResourceType]] = {}
    for rt in ALL:
        out.setdefault(rt.group, []).append(rt)
    return out
