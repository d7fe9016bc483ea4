"""Invariant checks over what the sandbox recorded: the API server's write history and the emulated
lifecycle actions. Tests, the demo and the benchmarks judge nodecycle by these, never by its own logs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nodecycle_sandbox.aws.records import TERMINATING, ActionRecord
from nodecycle_sandbox.kube import HistoryEntry
from nodecycle_sandbox.kube.history import API
from nodecycle_sandbox.kube.meta import parse_rfc3339


@dataclass(frozen=True)
class Breach:
    time: float
    budget: str  # namespace/name of the PodDisruptionBudget
    healthy: int
    desired: int


def pdb_breaches(history: Iterable[HistoryEntry]) -> list[Breach]:
    """Every moment a PodDisruptionBudget had fewer healthy pods than it requires (from its status)."""
    breaches = []
    for entry in history:
        if entry.kind != "PodDisruptionBudget" or entry.removed:
            continue
        status = entry.object.get("status") or {}
        if "currentHealthy" in status and status["currentHealthy"] < status.get("desiredHealthy", 0):
            breaches.append(
                Breach(
                    entry.time,
                    f"{entry.namespace}/{entry.name}",
                    status["currentHealthy"],
                    status["desiredHealthy"],
                )
            )
    return breaches


def cordon_peaks(
    history: Sequence[HistoryEntry],
    released: Mapping[str, float] | None = None,
    *,
    evictions: bool = False,
) -> tuple[int, dict[str, int]]:
    """The most nodes cordoned at once, in the cluster and in each zone.

    ``released`` (node -> time) ends a node's count early: a node whose terminate action was completed has
    given its budget slot back, even though its Node object lingers, cordoned, until the instance is gone.
    Without it, a node counts until it is uncordoned or removed.

    ``evictions``: a node also counts from an API caller's eviction or delete of a pod bound to it while it was
    not cordoned (a drain that never cordoned its node disrupts it all the same), until it is released or
    removed: its uncordoned writes (the kubelet's) do not end that count.
    """
    cut = released or {}
    spans: list[tuple[float, int, str | None]] = []  # (time, +1/-1, zone)
    since: dict[str, tuple[float, str | None]] = {}
    zone_of: dict[str, str | None] = {}
    node_of_pod: dict[tuple[str, str], str] = {}
    uncordoned: set[str] = set()  # nodes counted from an eviction, not a cordon
    for entry in history:
        if evictions and entry.kind == "Pod":
            node = (entry.object.get("spec") or {}).get("nodeName")
            if node:
                node_of_pod[(entry.namespace, entry.name)] = node
            evicted = entry.resource == "pods/eviction" or entry.verb == "delete"
            if node and evicted and entry.source == API and node not in since:
                since[node] = (entry.time, zone_of.get(node))
                uncordoned.add(node)
            continue
        if entry.kind != "Node":
            continue
        zone_of[entry.name] = entry.zone
        cordoned = entry.unschedulable and not entry.removed
        if cordoned:
            uncordoned.discard(entry.name)
        elif entry.name in uncordoned and not entry.removed:
            continue
        else:
            uncordoned.discard(entry.name)
        if cordoned and entry.name not in since:
            since[entry.name] = (entry.time, entry.zone)
        elif not cordoned and entry.name in since:
            start, zone = since.pop(entry.name)
            spans += _span(start, min(entry.time, cut.get(entry.name, entry.time)), zone)
    for name, (start, zone) in since.items():
        spans += _span(start, cut.get(name, float("inf")), zone)
    peak, zones = 0, dict[str, int]()
    current: dict[str | None, int] = {}
    for _, change, zone in sorted(spans, key=lambda span: (span[0], span[1])):  # ends before starts
        current[zone] = current.get(zone, 0) + change
        peak = max(peak, sum(current.values()))
        if zone is not None:
            zones[zone] = max(zones.get(zone, 0), current[zone])
    return peak, dict(sorted(zones.items()))


def _span(start: float, end: float, zone: str | None) -> list[tuple[float, int, str | None]]:
    return [(start, +1, zone), (end, -1, zone)] if end > start else []


def released_at(history: Iterable[HistoryEntry], actions: Iterable[ActionRecord]) -> dict[str, float]:
    """Node -> when its instance's terminate action was completed (its budget slot released)."""
    nodes = nodes_of_instances(history)
    return {
        nodes[a.instance_id]: a.finished_at
        for a in actions
        if a.transition == TERMINATING and a.finished_at is not None and a.instance_id in nodes
    }


def nodes_of_instances(history: Iterable[HistoryEntry]) -> dict[str, str]:
    """Instance id -> node name, from the nodes' provider ids."""
    found = {}
    for entry in history:
        if entry.kind == "Node":
            provider = (entry.object.get("spec") or {}).get("providerID", "")
            if provider:
                found[provider.rsplit("/", 1)[-1]] = entry.name
    return found


def _drainable(pod: dict[str, object]) -> bool:
    meta = pod.get("metadata") or {}
    assert isinstance(meta, dict)
    owners = meta.get("ownerReferences") or []
    if any(ref.get("kind") == "DaemonSet" for ref in owners):
        return False
    return "kubernetes.io/config.mirror" not in (meta.get("annotations") or {})


def last_pod_gone(history: Sequence[HistoryEntry], node: str) -> float | None:
    """When the last drainable pod bound to ``node`` that a drain answers for went away (None if one never did:
    still there). A drain answers for the pods created before the node's last cordon in ``history``, as kubectl
    drain for the pods it lists at its start: a pod created after it (one that tolerates the cordon's taint,
    placed there by the scheduler) is not waited for (nodecycle leaves it alone: domain/drain/pods.py). The
    cordon's time here is the API server's own write, exact: nodecycle, which reads only stamped seconds, waits
    for the pods of a margin after it too, never for fewer."""
    cordoned = _last_cordon(history, node)
    born: dict[str, float] = {}  # a pod (its uid, else its name) -> its creation
    present: dict[str, float] = {}
    gone_at = 0.0
    for entry in history:
        if entry.kind != "Pod":
            continue
        key = f"{entry.namespace}/{entry.name}"
        meta = entry.object.get("metadata") or {}
        pod = str(meta.get("uid") or key)
        answered = cordoned is None or born.setdefault(pod, _created(meta, entry.time)) < cordoned
        if entry.removed:
            born.pop(pod, None)  # (a pod of the same name created again is another)
        on_node = (entry.object.get("spec") or {}).get("nodeName") == node and _drainable(entry.object)
        if on_node and answered and not entry.removed:
            present[key] = entry.time
        elif key in present:
            del present[key]
            gone_at = entry.time
    return None if present else gone_at


def _created(meta: Mapping[str, object], seen: float) -> float:
    """A pod's creation: its creationTimestamp (whole seconds, cut: a pod created in the second of a cordon counts
    as before it, as nodecycle's margin does), else when ``history`` first saw it (a history reset since its
    creation sees it later than it was made)."""
    stamp = meta.get("creationTimestamp")
    return parse_rfc3339(stamp) if isinstance(stamp, str) else seen


def _last_cordon(history: Sequence[HistoryEntry], node: str) -> float | None:
    """When ``node`` was last cordoned (made unschedulable from schedulable) in ``history``; None if it is not
    cordoned at its end."""
    since: float | None = None
    for entry in history:
        if entry.kind == "Node" and entry.name == node:
            cordoned = entry.unschedulable and not entry.removed
            since = (since if since is not None else entry.time) if cordoned else None
    return since


def healthy_pods_on_at(history: Sequence[HistoryEntry], node: str, at: float) -> list[str]:
    """The drainable pods bound to ``node`` that a PodDisruptionBudget counted healthy at ``at`` (Ready, not
    being deleted), as namespace/name."""
    healthy: set[str] = set()
    for entry in history:
        if entry.time > at:
            break
        if entry.kind != "Pod":
            continue
        key = f"{entry.namespace}/{entry.name}"
        on_node = (entry.object.get("spec") or {}).get("nodeName") == node
        if on_node and not entry.removed and counted_healthy(entry.object):
            healthy.add(key)
        else:
            healthy.discard(key)
    return sorted(healthy)


def counted_healthy(pod: dict[str, object]) -> bool:
    """A drainable pod a PodDisruptionBudget counts healthy: Ready, not being deleted (not a DaemonSet's or a
    mirror pod, which no drain evicts)."""
    if not _drainable(pod):
        return False
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    assert isinstance(meta, dict)
    assert isinstance(status, dict)
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return ready and not meta.get("deletionTimestamp")


def completed_before_drained(history: Sequence[HistoryEntry], actions: Iterable[ActionRecord]) -> list[str]:
    """Terminate actions that were completed while drainable pods were still on their node."""
    nodes = nodes_of_instances(history)
    early = []
    for action in actions:
        if action.transition != TERMINATING or action.outcome != "completed" or action.finished_at is None:
            continue
        node = nodes.get(action.instance_id)
        if node is None:
            continue  # the instance never had a node: nothing to drain
        before = [entry for entry in history if entry.time <= action.finished_at]
        gone = last_pod_gone(before, node)
        if gone is None:
            early.append(f"{action.instance_id} ({node})")
    return early


def unsettled(actions: Iterable[ActionRecord]) -> list[str]:
    """Actions that were not completed by a call, or were completed after their global timeout."""
    bad = []
    for action in actions:
        if action.outcome != "completed":
            bad.append(f"{action.instance_id} {action.transition}: {action.outcome}")
        elif action.finished_at is not None and action.finished_at > action.global_deadline:
            bad.append(f"{action.instance_id} {action.transition}: completed after its global timeout")
    return bad


def budgets_of(history: Iterable[HistoryEntry]) -> dict[str, tuple[str, dict[str, object]]]:
    """namespace/name of each PodDisruptionBudget -> (its namespace, its selector as last written)."""
    found: dict[str, tuple[str, dict[str, object]]] = {}
    for entry in history:
        if entry.kind == "PodDisruptionBudget" and not entry.removed:
            selector = (entry.object.get("spec") or {}).get("selector") or {}
            found[f"{entry.namespace}/{entry.name}"] = (entry.namespace, selector)
    return found


def selects(selector: Mapping[str, object], labels: Mapping[str, str]) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects an object with ``labels``; an empty
    selector selects everything, as a policy/v1 PodDisruptionBudget's does."""
    match = selector.get("matchLabels") or {}
    assert isinstance(match, dict)
    if any(labels.get(key) != value for key, value in match.items()):
        return False
    expressions = selector.get("matchExpressions") or []
    assert isinstance(expressions, list)
    for expression in expressions:
        key, operator, values = (
            expression.get("key"),
            expression.get("operator"),
            expression.get("values") or [],
        )
        has = key in labels
        if operator == "In" and not (has and labels[key] in values):
            return False
        if operator == "NotIn" and has and labels[key] in values:
            return False
        if operator == "Exists" and not has:
            return False
        if operator == "DoesNotExist" and has:
            return False
    return True
