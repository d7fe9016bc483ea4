"""Small helpers over Kubernetes objects held as JSON-like dicts."""

from __future__ import annotations

import datetime as dt
from typing import Any

JsonObj = dict[str, Any]

ZONE_LABEL = "topology.kubernetes.io/zone"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
# Sandbox-only knobs a pod (template) can carry to make tests fast or slow on purpose.
SHUTDOWN_ANNOTATION = "sandbox.nodecycle.io/shutdown-seconds"
START_ANNOTATION = "sandbox.nodecycle.io/start-seconds"
DEFAULT_GRACE_SECONDS = 30


def json_copy(value: Any) -> Any:
    """Deep copy of JSON data; several times faster than ``copy.deepcopy`` for dicts/lists/scalars."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_copy(v) for v in value]
    return value


def rfc3339(epoch: float) -> str:
    """Seconds precision, like the timestamps of a real API server."""
    return dt.datetime.fromtimestamp(int(epoch), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_rfc3339(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def metadata(obj: JsonObj) -> JsonObj:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def name_of(obj: JsonObj) -> str:
    return str(metadata(obj).get("name", ""))


def namespace_of(obj: JsonObj) -> str:
    return str(metadata(obj).get("namespace", ""))


def uid_of(obj: JsonObj) -> str:
    return str(metadata(obj).get("uid", ""))


def labels_of(obj: JsonObj) -> dict[str, str]:
    return metadata(obj).get("labels") or {}


def annotations_of(obj: JsonObj) -> dict[str, str]:
    return metadata(obj).get("annotations") or {}


def is_terminating(obj: JsonObj) -> bool:
    return bool(metadata(obj).get("deletionTimestamp"))


def controller_ref(obj: JsonObj) -> JsonObj | None:
    for ref in metadata(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_ref(owner: JsonObj, *, controller: bool = True) -> JsonObj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": name_of(owner),
        "uid": uid_of(owner),
        "controller": controller,
        "blockOwnerDeletion": controller,
    }


def condition(obj: JsonObj, kind: str) -> JsonObj | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def condition_true(obj: JsonObj, kind: str) -> bool:
    cond = condition(obj, kind)
    return cond is not None and cond.get("status") == "True"


def node_ready(node: JsonObj) -> bool:
    return condition_true(node, "Ready")


def node_schedulable(node: JsonObj) -> bool:
    return node_ready(node) and not (node.get("spec") or {}).get("unschedulable")


def pod_phase(pod: JsonObj) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


def pod_ready(pod: JsonObj) -> bool:
    return condition_true(pod, "Ready")


def pod_terminal(pod: JsonObj) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


def pod_node(pod: JsonObj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def pod_active(pod: JsonObj) -> bool:
    """Counts toward its controller's replicas: neither terminating nor finished."""
    return not is_terminating(pod) and not pod_terminal(pod)


def pod_healthy(pod: JsonObj) -> bool:
    """Counts toward a PodDisruptionBudget: Ready and not being deleted."""
    return pod_ready(pod) and not is_terminating(pod)


def pods_capacity(node: JsonObj) -> int:
    status = node.get("status") or {}
    for key in ("allocatable", "capacity"):
        value = (status.get(key) or {}).get("pods")
        if value is not None:
            return int(value)
    return 110


def float_annotation(obj: JsonObj, key: str, default: float) -> float:
    """A seconds annotation; pods are created only when theirs parse (see the API's pod validation)."""
    raw = annotations_of(obj).get(key)
    return default if raw is None else float(raw)


def with_condition(conditions: list[JsonObj], new: JsonObj, now: float) -> list[JsonObj]:
    """Replace the condition of ``new["type"]``, keeping lastTransitionTime unless its status changed."""
    out: list[JsonObj] = []
    found = False
    for cond in conditions:
        if cond.get("type") == new["type"]:
            found = True
            merged = dict(new)
            same = cond.get("status") == new["status"]
            merged["lastTransitionTime"] = cond.get("lastTransitionTime") if same else rfc3339(now)
            out.append(merged)
        else:
            out.append(cond)
    if not found:
        out.append({**new, "lastTransitionTime": rfc3339(now)})
    return out
