"""The Kubernetes cluster as the drain, the readiness gate and the sweeper see it: nodes, the pods on one
node, evictions, events.

Plain values and ports; the adapters (``nodecycle.adapters.kube``, ``nodecycle.adapters.aws``) implement
them with the official client and boto3.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict

from nodecycle.domain.model import Transition, record_id

OWNER_ANNOTATION = "nodecycle.io/owner"
IN_PROGRESS_ANNOTATION = "nodecycle.io/in-progress"
# Left by the stop of an instance that clears a lifecycle's annotations before that lifecycle's cleanup: the
# lifecycle's id, so that its cleanup may still lift its cordon (and no later one's). Any claim removes it.
RELEASED_FOR_ANNOTATION = "nodecycle.io/released-for"
EXCLUDE_LB_LABEL = "node.kubernetes.io/exclude-from-external-load-balancers"
ZONE_LABEL = "topology.kubernetes.io/zone"


# defer_build: read by the drain function and the sweeper, built at their first read of the cluster rather than
# at every function's cold start (the intake and eip functions import this module, never these models)
class NodeInfo(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    name: str
    instance_id: str | None
    zone: str | None
    uid: str | None = None  # metadata.uid: what Events name the node by
    ready: bool
    owner: str | None  # the nodecycle.io/owner annotation
    in_progress: str | None  # the nodecycle.io/in-progress annotation (JSON)
    resource_version: str
    unschedulable: bool = False  # spec.unschedulable: cordoned, by nodecycle or anyone
    excluded_from_lb: bool = False  # labelled node.kubernetes.io/exclude-from-external-load-balancers
    released_for: str | None = None  # the nodecycle.io/released-for annotation
    # The keys of its NoSchedule and NoExecute taints: what keeps pods off it (PreferNoSchedule does not)
    taints: tuple[str, ...] = ()
    # The timeAdded of its node.kubernetes.io/unschedulable:NoSchedule taint, on the API server's clock as written
    # (not moved to the reader's: compared only with the pods' creationTimestamps): when the node lifecycle
    # controller saw the cordon now in effect, moments after it (None: no such taint, or one without a time)
    cordoned_at: datetime | None = None
    # Ready is Unknown: the kubelet stopped posting the node's status (gone with its instance, or cut off), as
    # the node lifecycle controller marks it: nothing stops the pods deleted there.
    kubelet_lost: bool = False
    # Ready is False in the words of a kubelet whose container runtime is down or hung (PLEG not healthy): no pod
    # deleted there stops while it lasts, but a runtime that answers again (containerd restarted) stops them with
    # their grace. A NotReady node whose kubelet reports otherwise (its runtime's network not ready) stops them.
    runtime_down: bool = False
    # metadata.creationTimestamp, on the API server's clock as written (None: not told): a node older than the launch
    # it is found for outlived its instance's reboot, or another instance's life (see launch.ReadinessGate)
    created_at: datetime | None = None
    # status.nodeInfo.bootID: the id of the boot its kubelet last posted the node's status from (the machine's
    # /proc/sys/kernel/random/boot_id, new at every boot), in the same status update as its Ready condition. A node
    # whose instance rebooted says Ready as the old kubelet left it until the node monitor's grace (40 s) is over, and
    # after it until the new kubelet's first status update: a new boot id says that update came (None: not told)
    boot_id: str | None = None
    # The Ready condition's lastHeartbeatTime, on the kubelet's clock as it stamped it (None: not told): when its
    # kubelet last posted the node's status (at a change, else every nodeStatusReportFrequency, 5 minutes), which the
    # node lifecycle controller keeps as it was when it marks the node Unknown. A renewed Lease does not move it.
    ready_heartbeat_at: datetime | None = None

    @property
    def lifecycle(self) -> str | None:
        """The lifecycle record id the in-progress annotation names (None: none, or unreadable)."""
        try:
            data = json.loads(self.in_progress or "")
            return record_id(data["instance"], Transition.from_short(data["transition"]), data["token"])
        except (ValueError, KeyError, TypeError):
            return None

    def progress(self) -> dict[str, object]:
        """The in-progress annotation's fields ({} when none, or unreadable)."""
        try:
            data = json.loads(self.in_progress or "")
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}


class PodInfo(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)  # (see NodeInfo)

    namespace: str
    name: str
    uid: str
    controller_kind: str | None  # kind of the controlling owner reference, if any
    mirror: bool  # a static pod's mirror: the kubelet owns it, the API cannot evict it
    grace_period: int | None  # spec.terminationGracePeriodSeconds
    # metadata.deletionTimestamp: set when a deletion (or eviction) was accepted, to the moment by which the
    # kubelet should have stopped the pod (request + grace), on the reader's clock (the adapter moves it by how far
    # that runs ahead of the API server's, as the answer's Date tells); and metadata.deletionGracePeriodSeconds
    deletion_at: datetime | None = None
    deletion_grace: int | None = None
    # metadata.creationTimestamp, on the API server's clock as written (not moved to the reader's: compared only with
    # its node's cordon, another stamp of the API server's; see drain/pods.py). None: not told
    created_at: datetime | None = None
    # the controlling owner reference's uid (its ReplicaSet's, its StatefulSet's...): the pods of one controller are
    # selected by the same PodDisruptionBudgets, in all likelihood (see drain/evict.py's _PodCalls). None: not told
    controller_uid: str | None = None

    @property
    def terminating(self) -> bool:
        return self.deletion_at is not None

    @property
    def deletion_requested_at(self) -> datetime | None:
        if self.deletion_at is None:
            return None
        return self.deletion_at - timedelta(seconds=self.deletion_grace or 0)


class Eviction(StrEnum):
    EVICTED = "evicted"
    GONE = "gone"  # 404, or the pod was replaced (uid precondition failed)
    BLOCKED = "blocked"  # 429 naming a disruption budget: a PodDisruptionBudget would be violated
    THROTTLED = "throttled"  # 429 without one: the API server sheds load (priority and fairness)
    # 429 from an admission webhook: not this pod now, ask again later (KubeVirt's eviction interceptor, while it
    # live-migrates the pod's VM away first): the pod's answer, as a budget's block is, not the server's load
    DEFERRED = "deferred"
    # A Status of code 500 saying that more than one PodDisruptionBudget selects the pod (kube-apiserver answers it with
    # 201 Created, as the eviction subresource's result, not as an error)
    MISCONFIGURED = "misconfigured"
    # 403 with the cause NamespaceTerminating: the pod's namespace is being deleted, where the API server accepts
    # no create (an eviction is one) and its namespace controller deletes every pod: it goes without being asked
    NAMESPACE_TERMINATING = "namespace-terminating"
    # 400, 403, 422: the API server will not evict this pod (an admission webhook denies it, or the role lacks
    # pods/eviction); ``detail`` says why
    REFUSED = "refused"


@dataclass(frozen=True)
class EvictionResult:
    kind: Eviction
    detail: str = ""  # what the API server said (for BLOCKED: which budget, and how many pods it needs)
    # For THROTTLED (and DEFERRED, when the webhook said): the seconds the server asked to wait (Retry-After). For
    # BLOCKED, set when the budget is still being processed (its controller has not observed its latest spec): not
    # its lasting answer
    retry_after: float | None = None


class Refused(Exception):
    """The API server will not do this to this one object (400, 403, 422: an admission webhook denies it, the
    role lacks the permission, the request is invalid for it): that object's answer, not the cluster's.
    ``str(error)`` is what the API server said."""


class Claim(StrEnum):
    CLAIMED = "claimed"
    CONFLICT = "conflict"  # the node changed since it was read: read it again
    GONE = "gone"


class Cluster(Protocol):
    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        """The node of an instance: by ``spec.providerID``, else by the instance's private DNS name.

        The node named after the DNS name is read first (one GET); only with ``scan`` are all nodes listed
        to match the provider id, for clusters whose node names are not DNS names.
        """
        ...

    def get_node(self, name: str) -> NodeInfo | None: ...

    def node_version(self, name: str) -> tuple[str | None, str] | None:
        """The node's uid and resourceVersion, by a read of its metadata only (a fraction of its bytes: a real
        node's status, its images above all, is most of them); None when it is gone. Whether the node changed
        since it was last read whole, for one GET of a few kilobytes. Raises :class:`Refused` as
        :meth:`get_node` does."""
        ...

    def lease_renewed_at(self, node: str) -> datetime | None:
        """When the node's kubelet last renewed its Lease (``kube-node-lease/<node>``, one GET): a live kubelet
        renews it about every 10 s, a stopped one never again, while the node object may stay Ready for a while.
        None when the node has no Lease. Raises :class:`Refused` when the API server will not let it be read
        (403: a deployment whose RBAC predates the rule)."""
        ...

    def claim_node(
        self, node: NodeInfo, *, owner: str, in_progress: str, cordon: bool, exclude_from_lb: bool
    ) -> Claim:
        """One PATCH, conditional on the node's resourceVersion: owner + in-progress annotations, cordon. Raises
        :class:`Refused` when the API server will not patch the node (an admission webhook, RBAC)."""
        ...

    def release_node(
        self,
        node: NodeInfo,
        *,
        uncordon: bool = False,
        unlabel: bool = False,
        released_for: str | None = None,
    ) -> Claim:
        """One PATCH, conditional on the node (its uid) and this owner's annotations as read, not on its
        resourceVersion (its kubelet's status and others' labels move that at any time; a read showing none of
        this owner's marks stays conditional on it): remove both annotations together; for a node that will come
        back, lift the cordon (``uncordon``) and the load balancer exclusion (``unlabel``), each only where
        nodecycle set it and as the read shows it. ``released_for`` marks the node with the lifecycle whose
        annotations this clears before its cleanup (a stop of its instance); without it, the mark is removed.
        Raises :class:`Refused` as :meth:`claim_node` does."""
        ...

    def pods_on(self, node: str) -> list[PodInfo]:
        """The pods bound to one node (a field-selected list, never a cluster-wide one). Raises :class:`Refused`
        when the API server will not let them be listed (403: RBAC)."""
        ...

    def pod_metadata_on(self, node: str) -> list[PodInfo]:
        """The pods bound to one node as :meth:`pods_on` lists them, known by their metadata only (a fraction of
        their bytes): their ``grace_period`` (spec) is None, unknown. Raises :class:`Refused` as :meth:`pods_on`."""
        ...

    def evict(self, pod: PodInfo, grace_seconds: int) -> EvictionResult: ...

    def delete_pod(self, pod: PodInfo, grace_seconds: int) -> bool:
        """Delete (the force policy); False when the pod was already gone. Raises :class:`Refused` when the API
        server refuses to delete this pod."""
        ...


class OwnedNodes(Protocol):
    """The cluster as the sweeper sees it: which nodes exist, and which this owner left annotated."""

    def node_names(self) -> set[str]:
        """The names of every node."""
        ...

    def nodes_owned_by(self, owner: str) -> list[NodeInfo]:
        """The nodes annotated with ``owner``, known by their metadata only: their name, annotations and
        version, not what their spec and status tell (their instance, readiness, cordon)."""
        ...

    def release_node(self, node: NodeInfo, *, uncordon: bool = False) -> Claim: ...


class NodeMetadata(Protocol):
    """The cluster's nodes by their metadata, as the sweeper lists them (see :class:`OwnedNodes`)."""

    def node_metadata(self) -> list[NodeInfo]:
        """Every node (a paged list), known by its metadata only, as :meth:`OwnedNodes.nodes_owned_by`. A list
        that may lag behind the nodes as they are (a cache's): a node registered moments ago may be missing."""
        ...

    def nodes_now(self, names: Collection[str]) -> set[str]:
        """Of ``names``, those that are nodes now: each read as it is, not from the cache :meth:`node_metadata`
        may be listed from."""
        ...

    def release_node(self, node: NodeInfo, *, uncordon: bool = False) -> Claim: ...


class Events(Protocol):
    """Kubernetes Events that tell a drain's story to ``kubectl describe node`` and ``kubectl get events``:
    every decision (waiting for a slot, cordoned, eviction blocked, timed out, drained, completed). Best
    effort: an event that cannot be written is logged and forgotten, never a failed step."""

    def on_node(
        self, node: str, uid: str | None, reason: str, message: str, *, warning: bool = False
    ) -> None: ...

    def on_pod(self, pod: PodInfo, reason: str, message: str, *, warning: bool = False) -> None: ...
