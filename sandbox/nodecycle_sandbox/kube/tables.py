"""``meta.k8s.io/v1`` Table responses, the server-side printing ``kubectl get`` asks for."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nodecycle_sandbox.kube.meta import (
    JsonObj,
    is_terminating,
    metadata,
    node_ready,
    parse_rfc3339,
    pod_node,
    pod_phase,
)
from nodecycle_sandbox.kube.resources import DEPLOYMENTS, NODES, PDBS, PODS, ResourceType

Column = tuple[str, str, int, Callable[[JsonObj], Any]]  # name, type, priority (1 = only with -o wide), cell


def human_age(created: str | None, now: float) -> str:
    """kubectl's short durations: 45s, 5m10s, 3h, 2d."""
    if not created:
        return "<unknown>"
    seconds = max(0, int(now - parse_rfc3339(created)))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    hours = minutes // 60
    return f"{hours}h" if hours < 48 else f"{hours // 24}d"


def _node_status(node: JsonObj) -> str:
    status = "Ready" if node_ready(node) else "NotReady"
    return status + (",SchedulingDisabled" if (node.get("spec") or {}).get("unschedulable") else "")


def _node_roles(node: JsonObj) -> str:
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix) :] for k in (metadata(node).get("labels") or {}) if k.startswith(prefix))
    return ",".join(roles) or "<none>"


def _pod_ready(pod: JsonObj) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    total = len((pod.get("spec") or {}).get("containers") or [])
    return f"{sum(1 for s in statuses if s.get('ready'))}/{total}"


def _pdb_value(key: str) -> Callable[[JsonObj], Any]:
    return lambda pdb: str((pdb.get("spec") or {}).get(key, "N/A"))


def _age(now: float) -> Callable[[JsonObj], Any]:
    return lambda obj: human_age(metadata(obj).get("creationTimestamp"), now)


def _columns(rt: ResourceType, now: float) -> list[Column]:
    name: Column = ("Name", "string", 0, lambda o: metadata(o).get("name", ""))
    age: Column = ("Age", "string", 0, _age(now))
    if rt is NODES:
        return [
            name,
            ("Status", "string", 0, _node_status),
            ("Roles", "string", 0, _node_roles),
            age,
            (
                "Version",
                "string",
                0,
                lambda n: ((n.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", ""),
            ),
            (
                "Zone",
                "string",
                1,
                lambda n: (metadata(n).get("labels") or {}).get("topology.kubernetes.io/zone", ""),
            ),
        ]
    if rt is PODS:
        return [
            name,
            ("Ready", "string", 0, _pod_ready),
            ("Status", "string", 0, lambda p: "Terminating" if is_terminating(p) else pod_phase(p)),
            ("Restarts", "integer", 0, lambda p: 0),
            age,
            ("IP", "string", 1, lambda p: (p.get("status") or {}).get("podIP", "<none>")),
            ("Node", "string", 1, lambda p: pod_node(p) or "<none>"),
        ]
    if rt is DEPLOYMENTS:
        return [
            name,
            (
                "Ready",
                "string",
                0,
                lambda d: f"{(d.get('status') or {}).get('readyReplicas', 0)}/{d['spec']['replicas']}",
            ),
            ("Up-to-date", "integer", 0, lambda d: (d.get("status") or {}).get("updatedReplicas", 0)),
            ("Available", "integer", 0, lambda d: (d.get("status") or {}).get("availableReplicas", 0)),
            age,
        ]
    if rt is PDBS:
        return [
            name,
            ("Min Available", "string", 0, _pdb_value("minAvailable")),
            ("Max Unavailable", "string", 0, _pdb_value("maxUnavailable")),
            (
                "Allowed Disruptions",
                "integer",
                0,
                lambda p: (p.get("status") or {}).get("disruptionsAllowed", 0),
            ),
            age,
        ]
    return [name, age]


def table(rt: ResourceType, items: list[JsonObj], list_metadata: JsonObj, include_object: str) -> JsonObj:
    """``include_object`` is the ``includeObject`` query parameter: None, Metadata (default) or Object."""
    columns = _columns(rt, time.time())

    def row_object(obj: JsonObj) -> JsonObj | None:
        if include_object == "Object":
            return obj
        if include_object == "None":
            return None
        return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": metadata(obj)}

    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_metadata,
        "columnDefinitions": [
            {"name": n, "type": t, "format": "name" if n == "Name" else "", "description": "", "priority": p}
            for n, t, p, _ in columns
        ],
        "rows": [
            {"cells": [cell(obj) for _, _, _, cell in columns], "object": row_object(obj)} for obj in items
        ],
    }
