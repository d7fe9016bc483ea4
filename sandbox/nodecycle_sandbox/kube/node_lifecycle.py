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
"""

from __future__ import annotations

from nodecycle_sandbox.kube.builders import pressure_conditions, ready_condition
from nodecycle_sandbox.kube.meta import JsonObj, json_copy, rfc3339, with_condition

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
LOST_MESSAGE = "Kubelet stopped posting node status."


def tainted_unreachable(node: JsonObj) -> bool:
    """The node carries the unreachable taint whose effect evicts its pods."""
    return any(
        t.get("key") == UNREACHABLE_TAINT and t.get("effect") == "NoExecute"
        for t in (node.get("spec") or {}).get("taints") or []
    )


def toleration_seconds(pod: JsonObj, default: float) -> float | None:
    """How long the pod stays on an unreachable node: its own toleration of the NoExecute unreachable taint
    (None: for ever), or ``default`` when it has none (what DefaultTolerationSeconds would have added)."""
    for toleration in (pod.get("spec") or {}).get("tolerations") or []:
        key, effect = toleration.get("key"), toleration.get("effect")
        if key not in (UNREACHABLE_TAINT, None, "") or effect not in ("NoExecute", None, ""):
            continue
        if not key and toleration.get("operator") != "Exists":
            continue  # an empty key tolerates every taint only with the operator Exists
        seconds = toleration.get("tolerationSeconds")
        return None if seconds is None else max(0.0, float(seconds))
    return default


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


def reachable(node: JsonObj, now: float) -> JsonObj:
    """The node once its kubelet posts status again: Ready, without the unreachable taints."""
    updated = json_copy(node)
    status = updated.setdefault("status", {})
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


def shut_down(node: JsonObj, now: float) -> JsonObj:
    """The NotReady node as the cloud provider leaves it once it finds its instance stopped."""
    updated = json_copy(node)
    spec = updated.setdefault("spec", {})
    spec["taints"] = [
        *_other_taints(spec),
        {"key": SHUTDOWN_TAINT, "effect": "NoSchedule", "timeAdded": rfc3339(now)},
    ]
    return updated


def started(node: JsonObj) -> JsonObj:
    """The node once its instance runs again: without the shutdown taint."""
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
