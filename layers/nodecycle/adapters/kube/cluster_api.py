"""The cluster port on the official Kubernetes client.

Responses are read as JSON (``_preload_content=False``) rather than as the client's generated models: the
drain needs a handful of fields, and skipping model validation keeps a 300-node list cheap.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable, Collection, Iterator
from datetime import datetime, timedelta
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from nodecycle.adapters.kube import server_clock
from nodecycle.adapters.kube.core_v1 import CoreV1, finished
from nodecycle.adapters.kube.eks_access import REQUEST_TIMEOUT
from nodecycle.adapters.kube.errors import (
    forbidden_refused,
    kube_errors,
    namespace_terminating,
    retry_after,
    status_message,
    webhook_denied,
)
from nodecycle.adapters.kube.lists import PAGE, pages
from nodecycle.domain.errors import Contended, TransientError
from nodecycle.domain.ports.cluster import (
    EXCLUDE_LB_LABEL,
    IN_PROGRESS_ANNOTATION,
    OWNER_ANNOTATION,
    RELEASED_FOR_ANNOTATION,
    ZONE_LABEL,
    Claim,
    Eviction,
    EvictionResult,
    NodeInfo,
    PodInfo,
    Refused,
)

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
# A release conditional on the resourceVersion that meets a 409 reads its node again and tries again this often
RELEASE_REREADS = 2
# How a JSON patch that cannot be applied is answered (422): kube-apiserver says "the server rejected our request
# due to an error in our request", with no cause (handlers/patch.go, applyJSPatch: NewGenericServerResponse(...,
# isUnexpectedResponse=false)); some versions and proxies add the library's words, as a cause of type
# UnexpectedServerResponse or in the message (evanphx/json-patch: "testing value <path> failed", "test operation
# does not apply: is missing path: <path>"; a remove: "Unable to remove nonexistent key: <key>")
PATCH_NOT_APPLIED = "the server rejected our request due to an error in our request"
UNEXPECTED_RESPONSE = "UnexpectedServerResponse"
NOT_APPLIED = re.compile(r"testing value|test operation|missing path|test failed|nonexistent key", re.I)
LEGACY_ZONE_LABEL = "failure-domain.beta.kubernetes.io/zone"
# The eviction subresource's words for a pod that more than one PodDisruptionBudget selects: a Status of code 500,
# which kube-apiserver answers with 201 Created (read as the refusal it is: see core_v1._raise_failure_status)
MULTIPLE_BUDGETS = "more than one PodDisruptionBudget"
# Once the eviction subresource's 20 tries of the budget's status write, 500 ms apart, have all met a conflict
# (pkg/registry/core/pod/storage/eviction.go: EvictionsRetry), kube-apiserver answers that write's last error: a 409
# Conflict on the budget (details.kind poddisruptionbudgets), no Retry-After, for retry.RetryOnConflict returns the
# last conflict once its steps run out (client-go util/retry OnError; kubernetes/client-go#427), never the
# ErrWaitTimeout the handler turns into a 504 Timeout "couldn't update PodDisruptionBudget %q due to conflicts" with
# Retry-After 10. Both are read as the budget's contention: that 504 by its words (a server that sends it), the 409
# by the kind it names, which a pod's own 409 (its uid precondition: another pod of its name) does not
BUDGET_CONFLICTS = "due to conflicts"
BUDGET_KIND = "poddisruptionbudgets"
# The wait before a pod whose budget answered its contention with no Retry-After is asked again: the 10 s the
# handler's own 504 means to ask for, and about what its tries already spent
BUDGET_CONFLICTS_WAIT = 10.0
# What a metadata-only client asks for one object (its metadata: name, uid, labels, annotations, version), else
# the object whole from a server that cannot answer so
METADATA_OBJECT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
# The same for a list (see lists.py), with the same fallback
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
# Where each kubelet keeps its Lease, named after its node (the NodeLease feature: GA, and always on)
NODE_LEASE_NAMESPACE = "kube-node-lease"
# Up to how many nodes nodes_now reads one by one, before one list of them all costs less
NODES_READ_ONE_BY_ONE = 5


def instance_of(provider_id: str | None) -> str | None:
    """``aws:///eu-west-1a/i-0123456789abcdef0`` -> ``i-0123456789abcdef0``."""
    if not provider_id or not provider_id.startswith("aws://"):
        return None
    last = provider_id.rstrip("/").rsplit("/", 1)[-1]
    return last if last.startswith("i-") else None


# The API server's refusal of what was asked of this one object (a malformed or invalid request, a webhook that
# denies it, a role without the verb; 401 past the client's retry with a fresh token: a role the cluster no longer
# knows, as forbidden_refused takes it): never retried as transient, the step decides.
REFUSING = (400, 401, 403, 422)


def zone_of(labels: dict[str, Any]) -> str | None:
    """A node's zone from its labels: the GA label, else the beta one (nodes registered by older kubelets or cloud
    providers carry the beta label alone). The drain's read of a node and the budget's scope read it so alike."""
    return labels.get(ZONE_LABEL) or labels.get(LEGACY_ZONE_LABEL)


def node_info(data: dict[str, Any]) -> NodeInfo:
    meta = data.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    spec = data.get("spec") or {}
    conditions = (data.get("status") or {}).get("conditions") or []
    return NodeInfo(
        name=meta["name"],
        instance_id=instance_of(spec.get("providerID")),
        zone=zone_of(labels),
        uid=meta.get("uid"),
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        kubelet_lost=any(c.get("type") == "Ready" and c.get("status") == "Unknown" for c in conditions),
        runtime_down=any(c.get("type") == "Ready" and _runtime_down(c) for c in conditions),
        owner=annotations.get(OWNER_ANNOTATION),
        in_progress=annotations.get(IN_PROGRESS_ANNOTATION),
        resource_version=str(meta.get("resourceVersion", "")),
        unschedulable=bool(spec.get("unschedulable")),
        excluded_from_lb=EXCLUDE_LB_LABEL in labels,
        released_for=annotations.get(RELEASED_FOR_ANNOTATION),
        taints=tuple(
            str(t.get("key"))
            for t in spec.get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute")
        ),
        cordoned_at=_cordoned_at(spec.get("taints") or []),
        created_at=_timestamp(meta.get("creationTimestamp")),
        boot_id=((data.get("status") or {}).get("nodeInfo") or {}).get("bootID") or None,
        ready_heartbeat_at=next(
            (_timestamp(c.get("lastHeartbeatTime")) for c in conditions if c.get("type") == "Ready"), None
        ),
    )


# The taint the node lifecycle controller keeps on a cordoned node (doNoScheduleTaintingPass, TaintNodesByCondition),
# stamped with a timeAdded when it adds it (SwapNodeControllerTaint)
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def _cordoned_at(taints: list[dict[str, Any]]) -> datetime | None:
    """The timeAdded of the node's unschedulable NoSchedule taint, as the API server wrote it (None: none)."""
    for taint in taints:
        if taint.get("key") == UNSCHEDULABLE_TAINT and taint.get("effect") == "NoSchedule":
            try:
                return _timestamp(taint.get("timeAdded"))
            except ValueError:
                return None
    return None


# What a kubelet whose container runtime cannot act says of its node (Ready=False, reason KubeletNotReady, the
# runtime state's errors: pkg/kubelet/runtime.go): its PLEG has not relisted for 3 minutes (a hung containerd: "PLEG
# is not healthy: pleg was last seen active 3m5s ago; ..."), or the runtime does not answer at all. Its pods deleted
# are never stopped, as on a node whose kubelet is gone. (Not "container runtime network not ready": that kubelet
# still stops them. Nor a kubelet that has just started, before its first runtime check and relist: "container
# runtime status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful", for a second
# or so, then it stops them as any kubelet does.)
_RUNTIME_DOWN = ("pleg was last seen active", "container runtime is down", "container runtime not ready")


def _runtime_down(ready: dict[str, Any]) -> bool:
    """Whether the node's Ready condition is False in the words of a kubelet whose container runtime is down."""
    message = str(ready.get("message") or "")
    return ready.get("status") == "False" and any(words in message for words in _RUNTIME_DOWN)


def pod_info(data: dict[str, Any]) -> PodInfo:
    meta = data.get("metadata") or {}
    spec = data.get("spec") or {}
    controller = next((ref for ref in meta.get("ownerReferences") or [] if ref.get("controller")), None)
    return PodInfo(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta.get("uid", ""),
        controller_kind=controller.get("kind") if controller else None,
        controller_uid=controller.get("uid") if controller else None,
        mirror="kubernetes.io/config.mirror" in (meta.get("annotations") or {}),
        grace_period=spec.get("terminationGracePeriodSeconds"),
        deletion_at=_timestamp(meta.get("deletionTimestamp")),
        deletion_grace=meta.get("deletionGracePeriodSeconds"),
        # (on the API server's clock as written, unlike deletion_at: compared only with the node's cordon, its stamp)
        created_at=_timestamp(meta.get("creationTimestamp")),
    )


def _on_reader_clock(pod: PodInfo, ahead: timedelta) -> PodInfo:
    """``pod`` with its deletion deadline on the reader's clock, which runs ``ahead`` of the API server's: once the
    force policy has acted, a pod is left FORCED_STOP_SLACK (10 s) past that deadline, and a function whose clock
    ran 10 s or more ahead left the pods it forced while their grace still ran (its instance then terminated with
    them still stopping: invariant 2); one behind held the slot that much longer (invariant 10)."""
    if pod.deletion_at is None or not ahead:
        return pod
    return pod.model_copy(update={"deletion_at": server_clock.on_reader_clock(pod.deletion_at, ahead)})


def _timestamp(text: str | None) -> datetime | None:
    """An RFC 3339 timestamp of the API (``2026-12-01T10:00:00Z``), timezone-aware."""
    return None if not text else datetime.fromisoformat(text.replace("Z", "+00:00"))


def _json(response: Any) -> dict[str, Any]:
    """A raw answer's body as JSON. Read within the call's kube_errors: the client returned once it had the status
    and headers, and a connection lost half-way through the body fails here (urllib3's ProtocolError), a
    transient failure as one lost before the answer."""
    data: dict[str, Any] = json.loads(response.data)
    return data


class KubeCluster:
    def __init__(
        self, api_client: Callable[[], ApiClient], *, wall_clock: Callable[[], float] = time.time
    ) -> None:
        self._api_client = api_client
        self._wall_clock = wall_clock
        self._core: CoreV1 | None = None

    @property
    def _api(self) -> CoreV1:
        if self._core is None:
            self._core = CoreV1(self._api_client())
        return self._core

    # -- nodes ------------------------------------------------------------------------------------------

    def find_node(
        self, instance_id: str, private_dns_name: str | None, *, scan: bool = True
    ) -> NodeInfo | None:
        by_name = self.get_node(private_dns_name) if private_dns_name else None
        if by_name is not None and by_name.instance_id == instance_id:
            return by_name  # the common case on EKS: one GET
        if private_dns_name != instance_id:
            # A node named after its instance id (a kubelet's hostname overridden to it, as some AMIs and
            # provisioners do): one GET more, rather than found only by the first scan of every node (the
            # readiness gate scans minutes into a launch). One named so without a provider id yet is ours too.
            by_id = self.get_node(instance_id)
            if by_id is not None and by_id.instance_id in (instance_id, None):
                return by_id
        if not scan:
            return by_name if by_name is not None and by_name.instance_id is None else None
        # From the watch cache first (no etcd read), then, not there, as the nodes are now: the cache may lag behind
        # etcd (seconds under load) and miss a node registered moments ago, which a drain would take for an instance
        # with no node, its action completed without a drain. A miss is rare: a drain's node is found by its name but
        # when EC2 does not answer that name yet, and the readiness gate scans once in a few polls.
        for consistent in (False, True):
            for node in self._nodes(consistent=consistent):
                if node.instance_id == instance_id:
                    return node
        # A node named after the instance but without a provider id yet (still registering) is ours too.
        return by_name if by_name is not None and by_name.instance_id is None else None

    def get_node(self, name: str) -> NodeInfo | None:
        try:
            with forbidden_refused(), kube_errors(f"reading node {name}"):
                response = self._api.read_node(name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT)
                data = _json(response)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return node_info(data)

    def node_version(self, name: str) -> tuple[str | None, str] | None:
        try:
            with forbidden_refused(), kube_errors(f"reading the metadata of node {name}"):
                response = self._api.read_node(
                    name,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                    _headers={"Accept": METADATA_OBJECT},
                )
                meta = _json(response).get("metadata") or {}
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return meta.get("uid"), str(meta.get("resourceVersion", ""))

    def lease_renewed_at(self, node: str) -> datetime | None:
        try:
            with forbidden_refused(), kube_errors(f"reading the Lease of node {node}"):
                response = self._api.read_namespaced_lease(
                    node, NODE_LEASE_NAMESPACE, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
                )
                spec = _json(response).get("spec") or {}
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        # (as the kubelet stamped it, not moved onto this function's clock as the pods' deletion deadlines are: the
        # readiness gate compares it with the launch's start, Auto Scaling's time, never with its own now; moved by
        # this function's lead, a clock a minute off would take a dead kubelet for alive or a live one for dead)
        return _timestamp(spec.get("renewTime"))

    def node_metadata(self) -> list[NodeInfo]:
        # Of their metadata only: a real node's spec and status (its images above all) are most of its bytes,
        # and an API server answers a list from its watch cache with every node at once, whatever the limit (a
        # whole list of 5,000 nodes is over 100 MB of JSON, at every sweep)
        return list(self._nodes(metadata_only=True))

    def nodes_now(self, names: Collection[str]) -> set[str]:
        # Not from the watch cache, as node_metadata's list is, which may not have a node registered moments ago
        # yet. Each by a consistent list of it alone (the sweeper's role may list nodes, not get them; a name's
        # field selector is one key's read: the registry's ListPredicate, MatchesSingle); more than a few, by one
        # consistent list of every node's metadata (paged), rather than a call each.
        if len(names) > NODES_READ_ONE_BY_ONE:
            with forbidden_refused():
                listed = pages(
                    self._api.list_node,
                    "listing nodes",
                    metadata_only=True,
                    consistent=True,
                    _request_timeout=REQUEST_TIMEOUT,
                )
                return set(names) & {str((item.get("metadata") or {}).get("name")) for item in listed}
        return {name for name in sorted(names) if self._node_now(name) is not None}

    def _nodes(self, *, metadata_only: bool = False, consistent: bool = False) -> Iterator[NodeInfo]:
        with forbidden_refused():  # a role without list on nodes, as a read's
            listed = self._nodes_now() if consistent else self._list_nodes(metadata_only=metadata_only)
            yield from (node_info(item) for item in listed)

    def _list_nodes(self, *, metadata_only: bool = False) -> Iterator[dict[str, Any]]:
        return pages(
            self._api.list_node,
            "listing nodes",
            metadata_only=metadata_only,
            _request_timeout=REQUEST_TIMEOUT,
        )

    def _nodes_now(self) -> Iterator[dict[str, Any]]:
        """Every node as it is now (a consistent list, paged), not as the watch cache has it."""
        return pages(self._api.list_node, "listing nodes", consistent=True, _request_timeout=REQUEST_TIMEOUT)

    def claim_node(
        self, node: NodeInfo, *, owner: str, in_progress: str, cordon: bool, exclude_from_lb: bool
    ) -> Claim:
        metadata: dict[str, Any] = {
            "resourceVersion": node.resource_version,
            "annotations": {
                OWNER_ANNOTATION: owner,
                IN_PROGRESS_ANNOTATION: in_progress,
                RELEASED_FOR_ANNOTATION: None,
            },
        }
        if exclude_from_lb:
            metadata["labels"] = {EXCLUDE_LB_LABEL: "true"}
        body: dict[str, Any] = {"metadata": metadata}
        if cordon:
            body["spec"] = {"unschedulable": True}
        return self._patch_node(node.name, body)

    def release_node(
        self,
        node: NodeInfo,
        *,
        uncordon: bool = False,
        unlabel: bool = False,
        released_for: str | None = None,
    ) -> Claim:
        guarded = _release_guarded(node, uncordon=uncordon, unlabel=unlabel, released_for=released_for)
        if guarded is not None:
            return self._patch_node(node.name, guarded, content_type=JSON_PATCH)
        # Conditional on the resourceVersion: any write since the read (its kubelet's status, another controller's
        # label) is a 409, and a sweep patches what it listed long before, in the same order at every sweep. So the
        # release of marks a test cannot hold for (see _testable) reads the node again on a 409 and tries once more
        # while what it is about reads as it did (never a node claimed, cordoned or labelled otherwise since:
        # invariant 3); it lost to such a write at every sweep, its node left annotated for ever. (A release with
        # no marks to clear stays a conflict on any change, as ever.)
        claim = self._release_versioned(node, uncordon=uncordon, unlabel=unlabel, released_for=released_for)
        for _ in range(RELEASE_REREADS if _marked(node) else 0):
            if claim is not Claim.CONFLICT:
                break
            fresh = self._node_now(node.name)
            if fresh is None:
                return Claim.GONE
            if _release_premises(fresh, uncordon, unlabel) != _release_premises(node, uncordon, unlabel):
                break
            claim = self._release_versioned(
                fresh, uncordon=uncordon, unlabel=unlabel, released_for=released_for
            )
        return claim

    def _node_now(self, name: str) -> NodeInfo | None:
        """The node as it is now, by a consistent list of it alone (what the sweeper's role may do: list, not
        get; and not the watch cache's copy, which may predate the write that made the 409)."""
        with forbidden_refused():
            listed = pages(
                self._api.list_node,
                f"reading node {name}",
                consistent=True,
                field_selector=f"metadata.name={name}",
                _request_timeout=REQUEST_TIMEOUT,
            )
            return next((node_info(item) for item in listed), None)

    def _release_versioned(
        self, node: NodeInfo, *, uncordon: bool, unlabel: bool, released_for: str | None
    ) -> Claim:
        metadata: dict[str, Any] = {
            "resourceVersion": node.resource_version,
            "annotations": {
                OWNER_ANNOTATION: None,
                IN_PROGRESS_ANNOTATION: None,
                RELEASED_FOR_ANNOTATION: released_for,
            },
        }
        body: dict[str, Any] = {"metadata": metadata}
        if unlabel:
            metadata["labels"] = {EXCLUDE_LB_LABEL: None}
        if uncordon:
            body["spec"] = {"unschedulable": None}
        return self._patch_node(node.name, body)

    def _patch_node(self, name: str, body: Any, *, content_type: str = MERGE_PATCH) -> Claim:
        # A merge patch that carries metadata.resourceVersion is applied only if the node has not changed
        # since it was read: the API server answers 409 otherwise. A JSON patch is applied only if its tests
        # hold: 422 otherwise, with the words of the failed test.
        try:
            with kube_errors(f"patching node {name}"):
                finished(
                    self._api.patch_node(
                        name,
                        body,
                        _content_type=content_type,
                        _preload_content=False,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
        except ApiException as error:
            if error.status == 409:
                log.info("node %s changed since it was read (409): not patched", name)
                return Claim.CONFLICT
            if content_type == JSON_PATCH and error.status == 422 and _test_failed(error):
                log.info("node %s is no longer as its release read it: not released", name)
                return Claim.CONFLICT
            if error.status == 404:
                return Claim.GONE
            if error.status in REFUSING:
                # The node's answer (a webhook that guards it, a role without patch on nodes), not the cluster's:
                # the step decides what becomes of the drain, rather than the message failing until its DLQ
                raise Refused(status_message(error)) from error
            raise
        return Claim.CLAIMED

    # -- pods -------------------------------------------------------------------------------------------

    def pods_on(self, node: str) -> list[PodInfo]:
        return self._pods_on(node, headers={})

    def pod_metadata_on(self, node: str) -> list[PodInfo]:
        # (a pod's spec and status are most of its bytes; its metadata says its owner, its deletion, a mirror)
        return self._pods_on(node, headers={"Accept": METADATA_LIST})

    def _pods_on(self, node: str, *, headers: dict[str, str]) -> list[PodInfo]:
        # A consistent read (no resourceVersion): whether the node is empty must not come from a cache
        # that may lag behind the evictions.
        pods: list[PodInfo] = []
        token: str | None = None
        while True:
            with forbidden_refused(), kube_errors(f"listing the pods of node {node}"):
                response = self._api.list_pod_for_all_namespaces(
                    field_selector=f"spec.nodeName={node}",
                    limit=PAGE,
                    _continue=token,
                    _headers=headers,
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT,
                )
                page = _json(response)
            # (each pod's deletion deadline on this function's clock: the API server stamped it on its own, and
            # the drain compares it with its now, a function's clock that may run a minute off; see _on_reader_clock)
            ahead = server_clock.lead(response, self._wall_clock())
            pods.extend(_on_reader_clock(pod_info(item), ahead) for item in page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return pods

    def evict(self, pod: PodInfo, grace_seconds: int) -> EvictionResult:
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": _delete_options(pod, grace_seconds),
        }
        try:
            self._api.create_namespaced_pod_eviction(
                pod.name, pod.namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if error.status == 429:
                budget = _disruption_budget_cause(error)
                if budget is None and webhook_denied(error):
                    # An admission webhook's "not now" for this pod, in the code it chose (KubeVirt's eviction
                    # interceptor answers 429 while it moves the pod's VM away, as kubectl drain retries a 429):
                    # the pod's answer, not the server's load, which API Priority and Fairness answers in plain
                    # text with a Retry-After. Taken for throttling, every pass stopped at that pod
                    return EvictionResult(Eviction.DEFERRED, status_message(error), retry_after(error))
                if budget is None:  # no budget named: the API server is shedding load
                    return EvictionResult(Eviction.THROTTLED, status_message(error), retry_after(error))
                # (a budget its controller has not observed since its spec changed answers with Retry-After
                # 10, "still being processed": a refusal with a wait, where a budget without room has none)
                return EvictionResult(Eviction.BLOCKED, budget, retry_after(error))
            if _budget_conflict(error):
                # Its budget's contention (many evictions at once under it), not the server's load, nor the pod
                # gone: the pod is asked again no sooner than that wait, the pods of other budgets are asked meanwhile
                raise Contended(
                    f"evicting pod {pod.namespace}/{pod.name}: HTTP {error.status} {status_message(error)}",
                    retry_after=retry_after(error) or BUDGET_CONFLICTS_WAIT,
                ) from error
            if error.status in (404, 409):  # gone, or replaced by a pod of the same name (uid precondition)
                return EvictionResult(Eviction.GONE)
            if error.status == 500 and MULTIPLE_BUDGETS in status_message(error):
                # the one 500 that is the pod's (any other is the server's own failure: transient); the drain
                # logs it, once per pod and poll
                return EvictionResult(Eviction.MISCONFIGURED, status_message(error))
            if namespace_terminating(error):
                # No eviction is accepted in a namespace being deleted: its namespace controller deletes the pod
                return EvictionResult(Eviction.NAMESPACE_TERMINATING, status_message(error))
            if error.status in REFUSING:
                # This pod's answer, not the cluster's: the other pods of the drain must still be evicted
                return EvictionResult(Eviction.REFUSED, status_message(error))
            with kube_errors(f"evicting pod {pod.namespace}/{pod.name}"):
                raise
        except HTTPError as error:
            raise TransientError(f"evicting pod {pod.namespace}/{pod.name}: {error}") from error
        return EvictionResult(Eviction.EVICTED)

    def delete_pod(self, pod: PodInfo, grace_seconds: int) -> bool:
        try:
            with kube_errors(f"deleting pod {pod.namespace}/{pod.name}"):
                finished(
                    self._api.delete_namespaced_pod(
                        pod.name,
                        pod.namespace,
                        grace_period_seconds=grace_seconds,
                        body=_delete_options(pod, grace_seconds),
                        _preload_content=False,
                        _request_timeout=REQUEST_TIMEOUT,
                    )
                )
        except ApiException as error:
            if error.status in (404, 409):  # gone, or replaced by a pod of the same name (uid precondition)
                return False
            if error.status in REFUSING:
                # This pod's answer (a webhook denies it, the role lacks the permission), not the cluster's: the
                # force policy must still delete the drain's other pods
                raise Refused(status_message(error)) from error
            raise
        return True


def _release_guarded(
    node: NodeInfo, *, uncordon: bool, unlabel: bool, released_for: str | None
) -> list[dict[str, Any]] | None:
    """The release of ``node`` as a JSON patch whose tests are what the release is about: the node (its uid),
    this owner's annotations as read (invariant 3: a node another owner, or another lifecycle, claimed since is
    left alone), the cordon and label it lifts as read. Not its resourceVersion: a node changes all the time
    (its kubelet's status, other controllers' labels and annotations), and a release conditional on it lost to
    any of those writes between the read and the patch (a sweep lists every node, then patches them one by
    one, in the same order at every sweep: on a busy cluster some were never released).

    None when the read shows none of this owner's marks to test (both annotations, or the released-for mark
    alone), or one a test cannot hold for (see _testable): such a release stays conditional on the
    resourceVersion."""
    owner, progress, mark = node.owner, node.in_progress, node.released_for
    if not _marked(node):
        return None
    if not all(_testable(value) for value in (node.uid, owner, progress, mark) if value is not None):
        return None
    ops: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": node.uid}]
    for key, value in (
        (OWNER_ANNOTATION, owner),
        (IN_PROGRESS_ANNOTATION, progress),
        (RELEASED_FOR_ANNOTATION, mark),
    ):
        if value is not None:
            ops += [
                {"op": "test", "path": _annotation(key), "value": value},
                {"op": "remove", "path": _annotation(key)},
            ]
    if released_for is not None:
        ops.append({"op": "add", "path": _annotation(RELEASED_FOR_ANNOTATION), "value": released_for})
    # What it lifts, only as read (a test of an absent field is not portable: RFC 6902 fails it, kube-apiserver's
    # library takes it as null): a cordon the read does not show is not lifted, rather than an operator's taken
    if uncordon and node.unschedulable:
        ops += [
            {"op": "test", "path": "/spec/unschedulable", "value": True},
            {"op": "add", "path": "/spec/unschedulable", "value": False},
        ]
    if unlabel and node.excluded_from_lb:
        # (by its key, as the read and the service controller know it: a test of the value nodecycle set failed at
        # every try once someone gave it another; a label removed since fails the remove, a 422 as a failed test)
        ops.append({"op": "remove", "path": "/metadata/labels/" + _pointer_token(EXCLUDE_LB_LABEL)})
    return ops


def _marked(node: NodeInfo) -> bool:
    """Whether the read shows this owner's marks for a release to be about (both annotations, or the released-for
    mark alone), on a node read with its uid."""
    owner, progress, mark = node.owner, node.in_progress, node.released_for
    holds = owner is not None and progress is not None
    return bool(node.uid) and (holds or (owner is None and progress is None and mark is not None))


def _release_premises(node: NodeInfo, uncordon: bool, unlabel: bool) -> tuple[Any, ...]:
    """What a release conditional on the resourceVersion is about: the node (its uid), this owner's marks, and the
    cordon and label it lifts; a read of the node again showing these alike may be released in its stead."""
    return (
        node.uid,
        node.owner,
        node.in_progress,
        node.released_for,
        node.unschedulable if uncordon else None,
        node.excluded_from_lb if unlabel else None,
    )


def _testable(value: str) -> bool:
    """Whether a JSON patch ``test`` of ``value`` can hold on kube-apiserver: its library (evanphx/json-patch)
    compares the raw JSON text sent with the object's as Go's encoding/json writes it, never decoded, and the
    client (json.dumps) escapes every non-ASCII character, Go none but U+2028 and U+2029, and Go escapes ``&``,
    ``<`` and ``>``, the client not. A value with any of them never equals itself there (a token is an event's
    id, which only its length bounds): a release testing it would be a conflict at every try. Printable ASCII but
    those three is written alike by both."""
    return all(" " <= ch <= "~" and ch not in "&<>" for ch in value)


def _annotation(key: str) -> str:
    return "/metadata/annotations/" + _pointer_token(key)


def _pointer_token(key: str) -> str:
    """``key`` as one JSON pointer token (RFC 6901): ``~`` and ``/`` escaped."""
    return key.replace("~", "~0").replace("/", "~1")


def _test_failed(error: ApiException) -> bool:
    """Whether a release's 422 is its JSON patch not applied (a test failed: the node is not as read), not the
    node's refusal (its validation, a webhook). Every other operation of the release is on a path a test before
    it found, or removes what the read showed (the label): a patch not applied is a node no longer as read."""
    try:
        status = json.loads(error.body or "{}")
    except ValueError:
        return False
    details = status.get("details") or {}
    causes = details.get("causes") or []
    if any(cause.get("type") == UNEXPECTED_RESPONSE for cause in causes):
        return True
    # kube-apiserver's own answer (handlers/patch.go, applyJSPatch: NewGenericServerResponse(422, ...,
    # isUnexpectedResponse=false)): its generic words, no cause, no kind nor name; the node's validation and an
    # admission policy's deny (NewInvalid) name the node and give causes
    if status.get("message") == PATCH_NOT_APPLIED and not (
        causes or details.get("kind") or details.get("name")
    ):
        return True
    words = [str(status.get("message") or "")] + [str(cause.get("message") or "") for cause in causes]
    return any(NOT_APPLIED.search(word) for word in words)


def _delete_options(pod: PodInfo, grace_seconds: int) -> dict[str, Any]:
    # The uid precondition makes sure a pod recreated under the same name (a StatefulSet's) is not hit.
    return {"gracePeriodSeconds": grace_seconds, "preconditions": {"uid": pod.uid}}


def _budget_conflict(error: ApiException) -> bool:
    """Whether an eviction's answer is its budget's contention (see BUDGET_CONFLICTS): a 409 whose details name a
    PodDisruptionBudget, or a 504 in the words of the eviction handler's timeout."""
    if error.status == 504:
        return BUDGET_CONFLICTS in status_message(error)
    if error.status != 409:
        return False
    try:
        details = json.loads(error.body or "{}").get("details") or {}
    except (ValueError, AttributeError):
        return False
    return isinstance(details, dict) and details.get("kind") == BUDGET_KIND


def _disruption_budget_cause(error: ApiException) -> str | None:
    """The DisruptionBudget cause of a 429 from the eviction subresource ("The disruption budget web needs 2
    healthy pods and has 2 currently"); None when the 429 names no budget (throttling)."""
    try:
        details = json.loads(error.body or "{}").get("details") or {}
    except ValueError:
        return None
    for cause in details.get("causes") or []:
        if cause.get("reason") == "DisruptionBudget":
            return str(cause.get("message") or "a PodDisruptionBudget")
    return None
