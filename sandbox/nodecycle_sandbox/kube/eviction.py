"""PodDisruptionBudget arithmetic and the pods/eviction subresource, as the disruption controller and the
eviction REST handler of kube-apiserver implement them."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from nodecycle_sandbox.kube import errors
from nodecycle_sandbox.kube.api import Admit, check_preconditions
from nodecycle_sandbox.kube.history import SANDBOX
from nodecycle_sandbox.kube.kubelet import Kubelet
from nodecycle_sandbox.kube.meta import (
    JsonObj,
    controller_ref,
    is_terminating,
    json_copy,
    labels_of,
    name_of,
    namespace_of,
    parse_rfc3339,
    pod_healthy,
    pod_phase,
    pod_ready,
    rfc3339,
    uid_of,
    with_condition,
)
from nodecycle_sandbox.kube.resources import ALL, EVICTION_API_VERSIONS, PDBS, PODS
from nodecycle_sandbox.kube.selectors import LabelSelector, from_label_selector_object
from nodecycle_sandbox.kube.store import Store

VIOLATION_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."
MULTIPLE_PDBS_MESSAGE = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
)
DISRUPTION_TARGET = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "EvictionByEvictionAPI",
    "message": "Eviction API: evicting",
}
# The disruption controller's DeletionTimeout: an eviction a budget allowed is a disruption of its pod (the
# budget's status.disruptedPods) until the pod is being deleted, or for this long if it never is (a delete
# the eviction's preconditions refused after the budget check).
DELETION_TIMEOUT_SECONDS = 120.0
# evictionREST's EvictionsRetry: how many times, and how far apart, the delete of a pod evicted without its budgets
# is tried when it meets a conflict; so is the budget's status write of one evicted under a budget, after which the
# handler answers that write's last conflict: a 409 Conflict on the poddisruptionbudgets.policy object, with no
# Retry-After. Its code means a 504 Timeout "couldn't update PodDisruptionBudget %q due to conflicts" with Retry-After
# 10 (pkg/registry/core/pod/storage/eviction.go: `if err == wait.ErrWaitTimeout { err = errors.NewTimeoutError(...,
# 10) }`), but retry.RetryOnConflict never returns ErrWaitTimeout: once its steps run out it returns the last
# conflict error instead (client-go util/retry OnError: `if err == wait.ErrWaitTimeout { err = lastErr }`; see
# kubernetes/client-go#427), so that 504 is never sent
CONFLICT_RETRIES = 20
CONFLICT_RETRY_SECONDS = 0.5
# checkAndDecrement's MaxDisruptedPodSize: more evictions not yet confirmed by the disruption controller are refused
MAX_DISRUPTED_PODS = 2000


@dataclass(frozen=True)
class Budget:
    expected: int
    desired: int
    current: int
    allowed: int
    disrupted: dict[str, str] = field(default_factory=dict)  # status.disruptedPods still counted
    # Why the disruption controller's sync failed (its error's words), when it did: then it writes failSafe's status,
    # not these counts (see Controllers._sync_statuses)
    failure: str | None = None


def _scaled(value: int | str, total: int) -> int:
    """An int-or-percent scaled against ``total``, rounding up (intstr.GetScaledValueFromIntOrPercent)."""
    if isinstance(value, int):
        return value
    if not value.endswith("%") or not value[:-1].isdigit():
        raise ValueError(f"invalid int-or-percent {value!r}")
    return math.ceil(int(value[:-1]) * total / 100)


class _SyncFailed(Exception):
    """The disruption controller's sync of a budget failed (getExpectedScale's error, in its words)."""


def _expected_scale(store: Store, pods: list[JsonObj]) -> int:
    """The sum of the scales of the pods' controllers, as getExpectedScale finds them: a ReplicaSet's Deployment's
    replicas, else the ReplicaSet's own. A pod without a controller is left out (an unmanaged pod: an Event, no
    failure, since 1.26); one whose controller is gone, or has no scale subresource (a Job's, a DaemonSet's, a
    mirror pod's Node), fails the sync (:class:`_SyncFailed`), which allows nothing until it succeeds."""
    scales: dict[str, int] = {}
    for pod in pods:
        ref = controller_ref(pod)
        if ref is None:
            continue
        if (ref.get("apiVersion"), ref.get("kind")) not in (
            ("apps/v1", "ReplicaSet"),
            ("apps/v1", "Deployment"),
        ):
            raise _SyncFailed(_no_scale(ref))
        controller = store.by_uid(str(ref.get("uid")))
        if controller is None or controller.get("kind") != ref.get("kind"):
            raise _SyncFailed(f'found no controllers for pod "{name_of(pod)}"')
        owner = controller_ref(controller) if controller.get("kind") == "ReplicaSet" else None
        deployment = (
            store.by_uid(str(owner.get("uid"))) if owner and owner.get("kind") == "Deployment" else None
        )
        # (a ReplicaSet whose Deployment is gone is found by the scale subresource's finder: its own replicas)
        scaled = deployment or controller
        scales[uid_of(scaled)] = int((scaled.get("spec") or {}).get("replicas", 1))
    return sum(scales.values())


def _no_scale(ref: JsonObj) -> str:
    """The scale finder's error for a controller of ``ref``'s kind: one the API server does not serve is no kind
    at all to its REST mapper; one it serves has no scale subresource."""
    api_version, kind = str(ref.get("apiVersion")), str(ref.get("kind"))
    served = next((rt for rt in ALL if (rt.api_version, rt.kind) == (api_version, kind)), None)
    if served is None:
        return f'no matches for kind "{kind}" in version "{api_version}"'
    return f"{served.qualified} does not implement the scale subresource"


class PodIndex:
    """Pods grouped by namespace and by label, so that matching every PodDisruptionBudget of a big cluster in
    one controller pass does not test every pod against every selector."""

    def __init__(self, pods: list[JsonObj]) -> None:
        self._by_namespace: dict[str, list[JsonObj]] = {}
        self._by_label: dict[tuple[str, str, str], list[JsonObj]] = {}
        for pod in pods:
            namespace = namespace_of(pod)
            self._by_namespace.setdefault(namespace, []).append(pod)
            for key, value in labels_of(pod).items():
                self._by_label.setdefault((namespace, key, value), []).append(pod)

    def select(self, namespace: str, selector: LabelSelector) -> list[JsonObj]:
        equality = next((r for r in selector.requirements if r.op == "In" and len(r.values) == 1), None)
        if equality is None:
            candidates = self._by_namespace.get(namespace, [])
        else:
            (value,) = equality.values
            candidates = self._by_label.get((namespace, equality.key, value), [])
        return [p for p in candidates if selector.matches(labels_of(p))]


def pdb_pods(store: Store, pdb: JsonObj, index: PodIndex | None = None) -> list[JsonObj]:
    selector = from_label_selector_object((pdb.get("spec") or {}).get("selector"))
    namespace = pdb["metadata"]["namespace"]
    return (index or PodIndex(store.items(PODS, namespace))).select(namespace, selector)


def compute_budget(store: Store, pdb: JsonObj, index: PodIndex | None = None) -> Budget:
    """What the disruption controller writes into the PDB's status at its pass, counted under the lock
    (``index``: the pods of the current controller pass, when computing many budgets at once). An eviction reads
    that status, never counts (see _check_and_decrement)."""
    with store.lock:
        pods = pdb_pods(store, pdb, index)
        spec = pdb.get("spec") or {}
        disrupted = _disrupted(pdb, pods, time.time())
        current = sum(1 for p in pods if pod_healthy(p) and name_of(p) not in disrupted)
        min_available = spec.get("minAvailable")
        max_unavailable = spec.get("maxUnavailable")
        if max_unavailable is None and not isinstance(min_available, str):
            # An integer minAvailable (or nothing) counts the pods themselves, not their controllers' scale.
            expected, desired = len(pods), int(min_available or 0)
        else:
            try:
                expected = _expected_scale(store, pods)
            except _SyncFailed as failed:
                return Budget(expected=0, desired=0, current=current, allowed=0, failure=str(failed))
            if max_unavailable is not None:
                desired = max(0, expected - _scaled(max_unavailable, expected))
            else:
                desired = _scaled(str(min_available), expected)
        allowed = current - desired if expected > 0 and current > desired else 0
        return Budget(
            expected=expected, desired=desired, current=current, allowed=allowed, disrupted=disrupted
        )


def _disrupted(pdb: JsonObj, pods: list[JsonObj], now: float) -> dict[str, str]:
    """The entries of the budget's status.disruptedPods that still count, as the disruption controller keeps
    them: pods there, not being deleted yet, evicted less than the DeletionTimeout ago."""
    entries = (pdb.get("status") or {}).get("disruptedPods") or {}
    return {
        name_of(pod): entries[name_of(pod)]
        for pod in pods
        if name_of(pod) in entries
        and not is_terminating(pod)
        and parse_rfc3339(entries[name_of(pod)]) + DELETION_TIMEOUT_SECONDS > now
    }


def evict(
    store: Store,
    kubelet: Kubelet,
    namespace: str,
    name: str,
    body: Any,
    *,
    source: str,
    admit: Admit = None,
) -> JsonObj:
    """POST .../pods/{name}/eviction: delete the pod unless a PodDisruptionBudget forbids it (429).

    In kube-apiserver's order: the body (400); the validating webhooks (``admit``); the pod (404); a pod the
    budgets do not guard is deleted at once, its preconditions checked by the delete (409, once the handler has
    tried it again for about 10 s); otherwise the budgets (more than one: a Status of code 500, answered with 201 as
    a result, not as an error; 429 without room), an allowed disruption recorded in the budget's status, and only
    then the delete with its preconditions: a precondition that no longer matches is 409 when the budget had room
    (the disruption stays recorded), 429 when it had none, and 429 'still being processed' for an unhealthy pod the
    budget let go without a disruption (unless the request named a resourceVersion: its 409)."""
    if not isinstance(body, dict):
        raise errors.bad_request("the body of an eviction must be a JSON object")
    # Like any typed endpoint, the body may leave apiVersion and kind out; they default to policy/v1 Eviction.
    api_version = body.get("apiVersion", "policy/v1")
    if api_version not in EVICTION_API_VERSIONS or body.get("kind", "Eviction") != "Eviction":
        raise errors.bad_request(
            f"expected an Eviction of {' or '.join(sorted(EVICTION_API_VERSIONS))}, got {api_version} {body.get('kind')}"
        )
    meta = body.get("metadata") or {}
    if meta.get("name") != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    if meta.get("namespace", namespace) != namespace:
        raise errors.bad_request("namespace in URL does not match namespace in Eviction object")
    options = body.get("deleteOptions") or {}
    if admit is not None:
        admit()  # the webhooks judge the Eviction before the pod is looked up: a gone pod gets their refusal
    # A pod evicted without its budgets whose delete meets a conflict (a uid precondition that no longer matches)
    # is tried again, CONFLICT_RETRIES times in all, CONFLICT_RETRY_SECONDS apart, unless the request names a
    # resourceVersion of its own (evictionREST.Create: retry.OnError(EvictionsRetry, errors.IsConflict, ...)): its
    # 409 comes about 10 s late
    # A budget's status write that meets a conflict (another eviction under it, its controller) is tried again
    # CONFLICT_RETRIES times in all as well, whatever the request names, and then answered with its last conflict
    tries = 1 if (options.get("preconditions") or {}).get("resourceVersion") else CONFLICT_RETRIES
    for attempt in range(1, CONFLICT_RETRIES + 1):
        try:
            return _evict_once(store, kubelet, namespace, name, options, source=source)
        except _IgnoredBudgetConflict as conflict:
            if attempt >= tries:
                raise conflict.error from None
        except _BudgetWriteConflict as conflict:
            if attempt == CONFLICT_RETRIES:
                # (the status write's own error, as RetryOnConflict returns it: see CONFLICT_RETRIES)
                raise errors.stale_resource_version(PDBS, conflict.budget) from None
        time.sleep(CONFLICT_RETRY_SECONDS)  # (without the store's lock)
    raise AssertionError("unreachable")


class _BudgetWriteConflict(Exception):
    """The status write of an eviction under a budget met a conflict (see Store.contended_budgets)."""

    def __init__(self, budget: str) -> None:
        super().__init__(budget)
        self.budget = budget


class _IgnoredBudgetConflict(Exception):
    """A conflict of the delete of a pod evicted without its budgets, which the handler tries again."""

    def __init__(self, error: errors.ApiError) -> None:
        super().__init__(error.message)
        self.error = error


def _evict_once(
    store: Store, kubelet: Kubelet, namespace: str, name: str, options: JsonObj, *, source: str
) -> JsonObj:
    with store.lock:
        pod = store.get(PODS, namespace, name)
        if pod is None:
            raise errors.not_found(PODS, name)
        grace = options.get("gracePeriodSeconds")
        if not _pdb_applies(pod):
            try:
                check_preconditions(PODS, pod, options)
            except errors.ApiError as error:
                raise _IgnoredBudgetConflict(error) from None
            pod = _disruption_target(store, pod, source)
            kubelet.delete_pod(pod, grace, verb="create", resource="pods/eviction", source=source)
            return _success()
        labels = labels_of(pod)
        pdbs = [p for p in store.items(PDBS, namespace) if _guards(p, labels)]
        if len(pdbs) > 1:
            # Not an error but the result evictionREST.Create returns (rtStatus): a Status of code 500, no reason,
            # no details, its words, which kube-apiserver's create handler writes as it writes any result, with
            # HTTP 201 Created (handlers/create.go: the Status's code is not the answer's). client-go reads a
            # Failure Status in a 2xx answer as the error it says (rest.Request.transformResponse), so kubectl
            # shows it as a 500; a client that reads the HTTP status alone takes it for an eviction
            return _multiple_budgets()
        if pdbs:
            pdb = pdbs[0]
            # (judged on the budget's status as its controller last wrote it and earlier evictions took it down,
            # as checkAndDecrement judges it: the pods are not counted here, so a replacement turned Ready since
            # the controller's last pass gives no room until its next)
            status = pdb.get("status") or {}
            desired, current = int(status.get("desiredHealthy", 0)), int(status.get("currentHealthy", 0))
            unhealthy_may_go = not pod_ready(pod) and (
                (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
                or 0 < desired <= current
            )
            if not unhealthy_may_go:
                _check_and_decrement(store, pdb, name)
            elif not (options.get("preconditions") or {}).get("resourceVersion"):
                # An unhealthy pod let go without a disruption is deleted on condition of the resourceVersion it was
                # read at (updateDeletionOptions: not turned healthy since), and a conflict of that delete, the
                # caller's uid's included, is answered as a budget still being processed when the request named no
                # resourceVersion of its own: clients retry a 429 (here the pod is read and deleted under one lock,
                # so only the caller's preconditions can conflict)
                try:
                    check_preconditions(PODS, pod, options)
                except errors.ApiError:
                    raise _still_processed(pdb) from None
        check_preconditions(PODS, pod, options)
        pod = _disruption_target(store, pod, source)
        kubelet.delete_pod(pod, grace, verb="create", resource="pods/eviction", source=source)
        return _success()


def _disruption_target(store: Store, pod: JsonObj, source: str) -> JsonObj:
    """The pod with the condition kube-apiserver sets before an eviction's delete (PodDisruptionConditions,
    GA in 1.31: addConditionAndDeletePod), written on its own, through the status store: one more write and
    resourceVersion, seen by anyone who reads or lists the pod before it goes. Unchanged when it has it."""
    updated = json_copy(pod)
    status = updated.setdefault("status", {})
    status["conditions"] = with_condition(status.get("conditions") or [], DISRUPTION_TARGET, time.time())
    if updated == pod:
        return pod
    return store.write(PODS, updated, verb="update", source=source, resource="pods/status")


def _check_and_decrement(store: Store, pdb: JsonObj, pod: str) -> None:
    """checkAndDecrement: refuse an eviction the budget's status has no room for, else record it there (the eviction
    handler's own status write, not the caller's): the pod is about to go, so the budget no longer counts it."""
    status = dict(pdb.get("status") or {})
    if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 0)):
        raise _still_processed(pdb)  # (a budget its controller has not observed since its spec changed)
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed < 0:
        raise errors.ApiError(
            403,
            "Forbidden",
            f'poddisruptionbudget.policy "{name_of(pdb)}" is forbidden: pdb disruptions allowed is negative',
            _budget_details(pdb),
        )
    disrupted = dict(status.get("disruptedPods") or {})
    if len(disrupted) > MAX_DISRUPTED_PODS:
        raise errors.ApiError(
            403,
            "Forbidden",
            f'poddisruptionbudget.policy "{name_of(pdb)}" is forbidden: DisruptedPods map too big - too many '
            "evictions not confirmed by PDB controller",
            _budget_details(pdb),
        )
    if allowed == 0:
        raise errors.too_many_requests(
            VIOLATION_MESSAGE,
            [
                {
                    "reason": "DisruptionBudget",
                    "message": f"The disruption budget {name_of(pdb)} needs {status.get('desiredHealthy', 0)} "
                    f"healthy pods and has {status.get('currentHealthy', 0)} currently",
                }
            ],
        )
    now = time.time()
    status["disruptionsAllowed"] = allowed - 1
    if allowed == 1:  # (UpdateDisruptionAllowedCondition)
        condition = {
            "type": "DisruptionAllowed",
            "status": "False",
            "reason": "InsufficientPods",
            "message": "",
            "observedGeneration": status.get("observedGeneration", 0),
        }
        status["conditions"] = with_condition(status.get("conditions") or [], condition, now)
    status["disruptedPods"] = {**disrupted, pod: rfc3339(now)}
    if (namespace_of(pdb), name_of(pdb)) in store.contended_budgets:
        raise _BudgetWriteConflict(name_of(pdb))  # (another writer updated it since it was read)
    updated = json_copy(pdb)
    updated["status"] = status
    store.write(PDBS, updated, verb="update", source=SANDBOX, resource="poddisruptionbudgets/status")


def _still_processed(pdb: JsonObj) -> errors.ApiError:
    """createTooManyRequestsError: 429 with Retry-After 10, the budget "still being processed by the server"."""
    cause = {
        "reason": "DisruptionBudget",
        "message": f"The disruption budget {name_of(pdb)} is still being processed by the server.",
    }
    return errors.too_many_requests(VIOLATION_MESSAGE, [cause], retry_after=10)


def _budget_details(pdb: JsonObj) -> dict[str, Any]:
    """The details of errors.NewForbidden(policy.Resource("poddisruptionbudget"), name, ...)."""
    return {"name": name_of(pdb), "group": "policy", "kind": "poddisruptionbudget"}


def _guards(pdb: JsonObj, labels: dict[str, str]) -> bool:
    """Whether ``pdb`` guards the evictions of a pod of ``labels``, as getPodDisruptionBudgets decides: its selector
    matches them. A null selector matches none, an empty one ({}) every pod of the namespace, as policy/v1 says
    and the disruption controller counts: kube-apiserver skipped empty selectors ("it should match nothing, not
    everything") until kubernetes#119732 (1.29), so a namespace-wide budget let every eviction through while its
    status said no pod could go."""
    selector = from_label_selector_object((pdb.get("spec") or {}).get("selector"))
    return selector.matches(labels)


def _pdb_applies(pod: JsonObj) -> bool:
    """Finished, pending and already terminating pods are evicted without consulting any budget."""
    return pod_phase(pod) not in ("Succeeded", "Failed", "Pending") and not is_terminating(pod)


def _multiple_budgets() -> JsonObj:
    """The Status evictionREST answers a pod two or more PodDisruptionBudgets select with, as its result."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": MULTIPLE_PDBS_MESSAGE,
        "code": 500,
    }


def _success() -> JsonObj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
