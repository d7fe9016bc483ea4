"""What the node lifecycle controller writes when a kubelet stops posting its status: after the node monitor
grace period every condition turns Unknown (reason ``NodeStatusUnknown``) and the node gets the
``node.kubernetes.io/unreachable`` taints, and its pods' Ready condition turns False (MarkPodsNotReady), so that
PodDisruptionBudgets count them unhealthy; when the kubelet comes back, it posts Ready again and the taints go.
The cloud provider's node lifecycle controller adds, to a NotReady node whose instance is stopped, the
``node.cloudprovider.kubernetes.io/shutdown`` taint, keeping the node object (it deletes only the nodes of
instances that no longer exist), and takes the taint off once the instance runs again.

Taint-based eviction: once a node carries the ``NoExecute`` unreachable taint, the taint manager deletes
(gracefully) each of its pods when its toleration of that taint is over: the pod's own ``tolerationSeconds``,
forever when it tolerates the taint without them (DaemonSet pods), else the API server's default (its
DefaultTolerationSeconds admission plugin gives every other pod 300 s). With no kubelet to stop their
containers, those pods then stay Terminating until the node object goes and the pod garbage collector
force-deletes them.

A kubelet that posts Ready=False (its container runtime hung: PLEG not healthy after three minutes) gets the same
from the controller at once, under the ``node.kubernetes.io/not-ready`` key (doNoExecuteTaintingPass: not-ready and
unreachable are exclusive, as Ready False and Unknown are). An operator's ``node.kubernetes.io/out-of-service``
NoExecute taint evicts every pod that does not tolerate it at once (no default toleration), and the pod garbage
collector force-deletes the pods terminating on such a node once it is not Ready (gcTerminating).
"""

from __future__ import annotations

import uuid

from nodecycle_sandbox.kube.builders import pressure_conditions, ready_condition
from nodecycle_sandbox.kube.meta import JsonObj, json_copy, rfc3339, with_condition

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"
# What the controller keeps on a cordoned node (spec.unschedulable), NoSchedule (doNoScheduleTaintingPass)
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
# The NoExecute taints the taint manager acts on here; kube-apiserver's DefaultTolerationSeconds gives every pod
# that does not tolerate the first two itself 300 s of each (--default-not-ready-toleration-seconds,
# --default-unreachable-toleration-seconds), none of the third
DEFAULT_TOLERATED = (NOT_READY_TAINT, UNREACHABLE_TAINT)
EVICTING_TAINTS = (*DEFAULT_TOLERATED, OUT_OF_SERVICE_TAINT)
# What a kubelet whose runtime hangs posts once its PLEG has not relisted for the threshold (pkg/kubelet/pleg:
# relistThreshold 3 min; the node status setter's ReadyCondition: reason KubeletNotReady, the runtime errors' words)
KUBELET_NOT_READY = "KubeletNotReady"
PLEG_THRESHOLD_SECONDS = 180.0
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
LOST_MESSAGE = "Kubelet stopped posting node status."


def evicting_taints(node: JsonObj) -> list[str]:
    """The keys of the node's NoExecute taints that the taint manager here evicts pods for."""
    return [
        str(t.get("key"))
        for t in (node.get("spec") or {}).get("taints") or []
        if t.get("key") in EVICTING_TAINTS and t.get("effect") == "NoExecute"
    ]


def toleration_seconds(pod: JsonObj, taint: str, default: float) -> float | None:
    """How long the pod stays on a node with the NoExecute ``taint``: the shortest tolerationSeconds of its own
    tolerations of it, whatever their order (None, for ever, only if none of them has any: the taint manager's
    getMinTolerationTime), else ``default`` for the not-ready and unreachable taints (what DefaultTolerationSeconds
    would have added), 0 for any other."""
    matched = False
    shortest: float | None = None
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        key, effect = toleration.get("key"), toleration.get("effect")
        if key not in (taint, None, "") or effect not in ("NoExecute", None, ""):
            continue
        if not key and toleration.get("operator") != "Exists":
            continue  # an empty key tolerates every taint only with the operator Exists
        matched = True
        seconds = toleration.get("tolerationSeconds")
        if seconds is not None:
            shortest = (
                max(0.0, float(seconds)) if shortest is None else min(shortest, max(0.0, float(seconds)))
            )
    if matched:
        return shortest
    return default if taint in DEFAULT_TOLERATED else 0.0


def tolerates_for_ever(tolerations: list[JsonObj], taint: str) -> bool:
    """Whether these tolerations keep a pod on a node with the NoExecute ``taint`` for ever (the DaemonSet
    controller places a pod only where it would stay)."""
    return toleration_seconds({"spec": {"tolerations": tolerations}}, taint, 0.0) is None


def registered_not_ready(node: JsonObj) -> None:
    """The node being created as kube-apiserver's TaintNodesByCondition admission plugin leaves it
    (plugin/pkg/admission/nodetaint): tainted ``node.kubernetes.io/not-ready:NoSchedule`` whatever its conditions
    say (a kubelet registers its node with its status), so that nothing is scheduled on it before the node
    lifecycle controller has seen it Ready and lifted the taint (``with_ready_taints``). As the plugin adds it:
    once, without a timeAdded, on create only (in place: the request's own copy)."""
    spec = node.setdefault("spec", {})
    taints: list[JsonObj] = spec.get("taints") or []
    if not any(t.get("key") == NOT_READY_TAINT and t.get("effect") == "NoSchedule" for t in taints):
        spec["taints"] = [*taints, {"key": NOT_READY_TAINT, "effect": "NoSchedule"}]


def with_ready_taints(node: JsonObj, now: float) -> JsonObj:
    """The node with the taints its Ready condition calls for, as the node lifecycle controller keeps them
    (TaintNodesByCondition's NoSchedule, doNoExecuteTaintingPass's NoExecute): not-ready while Ready is False,
    unreachable while it is Unknown, neither while it is True. Taints already there keep their timeAdded."""
    ready = next(
        (
            c.get("status")
            for c in (node.get("status") or {}).get("conditions") or []
            if c.get("type") == "Ready"
        ),
        None,
    )
    if ready is None:
        return node  # (no kubelet ever posted it: the controller's startup grace, not modelled, is not over)
    wanted = {"False": NOT_READY_TAINT, "Unknown": UNREACHABLE_TAINT}.get(str(ready))
    spec = node.get("spec") or {}
    taints: list[JsonObj] = spec.get("taints") or []
    kept = [t for t in taints if t.get("key") not in DEFAULT_TOLERATED or t.get("key") == wanted]
    if wanted is not None:
        for effect in ("NoSchedule", "NoExecute"):
            if not any(t.get("key") == wanted and t.get("effect") == effect for t in kept):
                kept.append({"key": wanted, "effect": effect, "timeAdded": rfc3339(now)})
    if kept == taints:
        return node
    updated = json_copy(node)
    if kept:
        updated.setdefault("spec", {})["taints"] = kept
    else:
        updated.setdefault("spec", {}).pop("taints", None)
    return updated


def with_unschedulable_taint(node: JsonObj, now: float) -> JsonObj:
    """The node with the ``node.kubernetes.io/unschedulable:NoSchedule`` taint while it is cordoned
    (``spec.unschedulable``) and without it once it is not, as the node lifecycle controller keeps it
    (doNoScheduleTaintingPass, TaintNodesByCondition: SwapNodeControllerTaint stamps the taint it adds with a
    timeAdded). A write of its own after each cordon and uncordon: the node's resourceVersion moves again."""
    spec = node.get("spec") or {}
    taints: list[JsonObj] = spec.get("taints") or []

    def ours(taint: JsonObj) -> bool:
        return taint.get("key") == UNSCHEDULABLE_TAINT and taint.get("effect") == "NoSchedule"

    if any(ours(t) for t in taints) == bool(spec.get("unschedulable")):
        return node
    updated = json_copy(node)
    if spec.get("unschedulable"):
        kept = [*taints, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": rfc3339(now)}]
    else:
        kept = [t for t in taints if not ours(t)]
    if kept:
        updated.setdefault("spec", {})["taints"] = kept
    else:
        updated.setdefault("spec", {}).pop("taints", None)
    return updated


def tolerates(pod: JsonObj, key: str, effect: str) -> bool:
    """Whether the pod tolerates a taint of ``key`` and ``effect`` without a value (core/v1
    Toleration.ToleratesTaint: an empty effect matches every effect, an empty key with the operator Exists every
    key, an empty operator is Equal)."""
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        if toleration.get("effect") not in (None, "", effect) or toleration.get("key") not in (None, "", key):
            continue
        operator = toleration.get("operator") or "Equal"
        if operator == "Exists" or (operator == "Equal" and not toleration.get("value")):
            return True
    return False


def runtime_not_ready(node: JsonObj, hung_for: float, threshold: float, now: float) -> JsonObj:
    """The node as its kubelet posts it once its container runtime hung past the PLEG threshold: Ready False."""
    updated = json_copy(node)
    status = updated.setdefault("status", {})
    message = (
        f"PLEG is not healthy: pleg was last seen active {_go_duration(hung_for)} ago; "
        f"threshold is {_go_duration(threshold)}"
    )
    ready = {
        "type": "Ready",
        "status": "False",
        "reason": KUBELET_NOT_READY,
        "message": message,
        "lastHeartbeatTime": rfc3339(now),
    }
    status["conditions"] = with_condition(status.get("conditions") or [], ready, now)
    return updated


def _go_duration(seconds: float) -> str:
    """A duration as Go's time.Duration prints it (3m0s, 3m0.5s), to the millisecond."""
    minutes, rest = divmod(round(seconds, 3), 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".")
    return f"{int(minutes)}m{text}s" if minutes else f"{text}s"


def unreachable(node: JsonObj, now: float) -> JsonObj:
    """The node as the controller leaves it once its kubelet is lost."""
    updated = json_copy(node)
    status = updated.setdefault("status", {})
    conditions: list[JsonObj] = status.get("conditions") or []
    for cond in list(conditions):
        unknown = {
            "type": cond["type"],
            "status": "Unknown",
            "reason": "NodeStatusUnknown",
            "message": LOST_MESSAGE,
            "lastHeartbeatTime": cond.get("lastHeartbeatTime", rfc3339(now)),
        }
        conditions = with_condition(conditions, unknown, now)
    status["conditions"] = conditions
    spec = updated.setdefault("spec", {})
    taints = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE_TAINT]
    taints += [
        {"key": UNREACHABLE_TAINT, "effect": "NoSchedule", "timeAdded": rfc3339(now)},
        {"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": rfc3339(now)},
    ]
    spec["taints"] = taints
    return updated


def pod_not_ready(pod: JsonObj, now: float) -> JsonObj:
    """The pod of a node not Ready as the controller leaves it (MarkPodsNotReady): its Ready condition False,
    without a reason, and nothing else; ContainersReady and the containers' statuses are the kubelet's to
    write, and there is none to write them."""
    updated = json_copy(pod)
    status = updated.setdefault("status", {})
    status["conditions"] = with_condition(
        status.get("conditions") or [], {"type": "Ready", "status": "False"}, now
    )
    return updated


def reachable(node: JsonObj, now: float, *, booted: bool = False) -> JsonObj:
    """The node once its kubelet posts status again: Ready, without the unreachable taints. ``booted``: its instance
    booted again (a reboot, a stop and start), and the kubelet's status carries the new boot's id in
    status.nodeInfo.bootID, as a real kubelet's does (the MachineInfo status setter, pkg/kubelet/nodestatus: the
    machine's /proc/sys/kernel/random/boot_id, new at every boot; it records a Rebooted event when it changed). A
    kubelet that only restarted keeps it."""
    updated = json_copy(node)
    status = updated.setdefault("status", {})
    if booted:
        status.setdefault("nodeInfo", {})["bootID"] = str(uuid.uuid4())
    conditions: list[JsonObj] = status.get("conditions") or []
    # (every condition it posts: the pressures the lost kubelet left Unknown too)
    for posted in (*pressure_conditions(now), ready_condition(True, now)):
        if any(c.get("type") == posted["type"] for c in conditions) or posted["type"] == "Ready":
            conditions = with_condition(conditions, posted, now)
    status["conditions"] = conditions
    spec = updated.setdefault("spec", {})
    taints = [t for t in spec.get("taints") or [] if t.get("key") != UNREACHABLE_TAINT]
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    return updated


def network_not_ready(node: JsonObj, now: float) -> JsonObj:
    """The node as a booted kubelet's first status post may leave it: NotReady, its runtime up but its network plugin
    not yet (the kubelet's ReadyCondition setter: "container runtime network not ready: NetworkReady=false
    reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized", until the CNI's
    node agent has written its config on this boot)."""
    updated = json_copy(node)
    status = updated.setdefault("status", {})
    not_ready = {
        **ready_condition(False, now),
        "message": "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
        "message:Network plugin returns error: cni plugin not initialized",
    }
    status["conditions"] = with_condition(status.get("conditions") or [], not_ready, now)
    return updated


def shut_down(node: JsonObj, now: float) -> JsonObj:
    """The NotReady node as the cloud provider leaves it once it finds its instance stopped."""
    updated = json_copy(node)
    spec = updated.setdefault("spec", {})
    spec["taints"] = [
        *_other_taints(spec),
        {"key": SHUTDOWN_TAINT, "effect": "NoSchedule", "timeAdded": rfc3339(now)},
    ]
    return updated


def tainted_shutdown(node: JsonObj) -> bool:
    return any(t.get("key") == SHUTDOWN_TAINT for t in (node.get("spec") or {}).get("taints") or [])


def started(node: JsonObj) -> JsonObj:
    """The node once its instance runs again and it says Ready: without the shutdown taint."""
    updated = json_copy(node)
    spec = updated.setdefault("spec", {})
    taints = _other_taints(spec)
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    return updated


def _other_taints(spec: JsonObj) -> list[JsonObj]:
    """The node's taints but the shutdown one."""
    return [t for t in spec.get("taints") or [] if t.get("key") != SHUTDOWN_TAINT]
