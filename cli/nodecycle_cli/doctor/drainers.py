"""The doctor's look for another drainer in the cluster: aws-node-termination-handler in IMDS mode.

Its Helm chart runs it then as a DaemonSet (in kube-system, named aws-node-termination-handler or
``<release>-aws-node-termination-handler``, labelled app.kubernetes.io/name=aws-node-termination-handler) whose pod
on each node watches the instance metadata, and drains its node on a Spot interruption notice and before a scheduled
event (and on a rebalance recommendation when told to): no group tag to check, no lifecycle hook, no budget.
nodecycle drains the same nodes on those very events (EventBridge's) and on terminations, so two drainers act on one
node: each evicts under its own count of what is unavailable, and one may uncordon (nodecycle after a maintenance)
or cordon what the other holds. Its queue mode (a Deployment) acts through a group tag, which the hooks' check sees
(aws_checks.NTH_MANAGED_TAG)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from nodecycle_cli.doctor.findings import Finding

CHECK = "cluster.other-drainers"
NTH = "aws-node-termination-handler"
NAME_LABEL = "app.kubernetes.io/name"

# What it drains on in IMDS mode: its setting, as said to an operator, and the handler's own default (pkg/config:
# Spot interruption draining on; scheduled event draining on in its current releases; rebalance draining off)
DRAINS_ON = (
    ("ENABLE_SPOT_INTERRUPTION_DRAINING", "Spot interruptions", True),
    ("ENABLE_SCHEDULED_EVENT_DRAINING", "scheduled events", True),
    ("ENABLE_REBALANCE_DRAINING", "rebalance recommendations", False),
)
# Go's strconv.ParseBool's false, which the handler reads its settings with
_FALSE = {"0", "f", "F", "FALSE", "false", "False"}
SHOWN = 3  # nodes named in a finding; the others counted


def termination_handlers(api_client: Any, managed: set[str] | None) -> list[Finding]:
    """A finding for each aws-node-termination-handler DaemonSet (IMDS mode) of the cluster, or one saying there is
    none. ``managed``: the instance ids of the stack's groups (None: not known, every node it runs on counts)."""
    from kubernetes import client

    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    handlers = [ds for ds in apps.list_daemon_set_for_all_namespaces().items if _is_handler(ds)]
    if not handlers:
        return [Finding.ok(CHECK, f"no {NTH} DaemonSet (IMDS mode) in the cluster")]
    instances = {_node_name(node): _instance_id(node) for node in core.list_node().items}
    return [_judged(ds, core, instances, managed) for ds in handlers]


def _is_handler(ds: Any) -> bool:
    labels = ds.metadata.labels or {}
    images = [container.image or "" for container in _containers(ds)]
    return (
        labels.get(NAME_LABEL) == NTH
        or ds.metadata.name == NTH
        or ds.metadata.name.endswith(f"-{NTH}")
        or any(image.split("@")[0].rsplit(":", 1)[0].endswith(f"/{NTH}") for image in images)
    )


def _judged(ds: Any, core: Any, instances: Mapping[str, str], managed: set[str] | None) -> Finding:
    where = f"{ds.metadata.namespace}/{ds.metadata.name}"
    env = _env(ds)
    if _flag(env, "ENABLE_SQS_TERMINATION_DRAINING", False):
        # (queue mode: it acts on the groups tagged for it, which the hooks' check sees)
        return Finding.ok(CHECK, f"{NTH} {where} runs in queue mode: see the groups' hooks")
    events = [said for variable, said, default in DRAINS_ON if _flag(env, variable, default)]
    if _flag(env, "DRY_RUN", False) or not events:
        return Finding.ok(
            CHECK, f"{NTH} {where} (IMDS mode) drains nothing (its draining is off, or DRY_RUN)"
        )
    selector = ",".join(f"{key}={value}" for key, value in (ds.spec.selector.match_labels or {}).items())
    pods = core.list_namespaced_pod(ds.metadata.namespace, label_selector=selector).items
    nodes = sorted({pod.spec.node_name for pod in pods if pod.spec.node_name})
    ours = [node for node in nodes if managed is None or instances.get(node) in managed]
    drains = f"drains its node on {_listed(events)}"
    if not ours:
        return Finding.ok(
            CHECK,
            f"{NTH} {where} (IMDS mode) {drains}, on {len(nodes)} node(s), none of the stack's groups'",
        )
    named = ", ".join(ours[:SHOWN]) + (f" and {len(ours) - SHOWN} more" if len(ours) > SHOWN else "")
    return Finding.problem(
        CHECK,
        f"{NTH} {where} runs in IMDS mode and {drains}, on {len(ours)} node(s) of the stack's groups: {named}",
        "it drains on what the instance metadata tells, with no hook and no budget, while nodecycle drains the same "
        "nodes on the same Spot interruptions and scheduled maintenance (EventBridge's) and on every termination: "
        "two drainers act on one node, each evicting outside the other's count (the disruption budget overrun), "
        "and one may cordon or uncordon what the other holds",
        f"keep it off the stack's nodes (a node affinity on the DaemonSet excluding their node groups: "
        f"docs/migrating.md, 'From {NTH}, IMDS mode'), or uninstall it (helm uninstall <release> -n "
        f"{ds.metadata.namespace}, or kubectl -n {ds.metadata.namespace} delete daemonset {ds.metadata.name})",
    )


def _containers(ds: Any) -> Sequence[Any]:
    return ds.spec.template.spec.containers or []


def _env(ds: Any) -> dict[str, str | None]:
    """The handler container's settings (every container's when none is named as it): a value, or None for one it
    reads from elsewhere (valueFrom), which the doctor cannot tell."""
    named = [c for c in _containers(ds) if c.name == NTH or f"/{NTH}" in (c.image or "")]
    containers = named or _containers(ds)
    return {
        var.name: var.value if var.value_from is None else None for c in containers for var in c.env or []
    }


def _flag(env: Mapping[str, str | None], variable: str, default: bool) -> bool:
    """The handler's reading of a setting: unset or empty is its default; one read from elsewhere (not known here)
    or that is no boolean (the handler refuses to start) is counted as on, the side that warns."""
    if variable not in env:
        return default
    value = env[variable]
    if value == "":
        return default
    return value not in _FALSE


def _listed(events: Sequence[str]) -> str:
    return events[0] if len(events) == 1 else ", ".join(events[:-1]) + f" and {events[-1]}"


def _node_name(node: Any) -> str:
    return str(node.metadata.name)


def _instance_id(node: Any) -> str:
    """The instance id of a node's providerID (aws:///<zone>/<instance id>)."""
    return str(getattr(node.spec, "provider_id", None) or "").rsplit("/", 1)[-1]
