"""What the node lifecycle controller writes when a kubelet stops posting its status: after the node monitor
grace period every condition turns Unknown (reason ``NodeStatusUnknown``) and the node gets the
``node.kubernetes.io/unreachable`` taints; when the kubelet comes back, it posts Ready again and the taints go.
The cloud provider's node lifecycle controller adds, to a NotReady node whose instance is stopped, the
``node.cloudprovider.kubernetes.io/shutdown`` taint, keeping the node object (it deletes only the nodes of
instances that no longer exist), and takes the taint off once the instance runs again.

Not emulated: taint-based eviction of the node's pods once their ``tolerationSeconds`` (300 by default) are
over; those deletions could not complete anyway, with no kubelet to stop the containers.
"""

from __future__ import annotations

from nodecycle_sandbox.kube.builders import ready_condition
from nodecycle_sandbox.kube.meta import JsonObj, json_copy, rfc3339, with_condition

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
SHUTDOWN_TAINT = "node.cloudprovider.kubernetes.io/shutdown"
LOST_MESSAGE = "Kubelet stopped posting node status."


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


def reachable(node: JsonObj, now: float) -> JsonObj:
    """The node once its kubelet posts status again: Ready, without the unreachable taints."""
    updated = json_copy(node)
    status = updated.setdefault("status", {})
    status["conditions"] = with_condition(status.get("conditions") or [], ready_condition(True, now), now)
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
