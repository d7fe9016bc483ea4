"""The timeline of an instance refresh: one lane per node, in phases, from what the sandbox recorded.

- waiting for a slot: from the start of the node's terminate action (the Auto Scaling emulation) until its
  cordon (the API server's history);
- draining: from the cordon until its last drainable pod was gone (the history);
- drained: from then until the action was completed, which released the node's budget slot;
- instance gone: from the completion (or the instance's termination, if later) to the end.

A node holds a budget slot while it is draining or drained: counted per zone and in all, against the
limits, that is what the picture shows next to the lanes. The lifecycle records add each lane's outcome.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

WAITING, DRAINING, DRAINED, GONE = "waiting for a slot", "draining", "drained", "instance gone"
PHASES = (WAITING, DRAINING, DRAINED, GONE)
HOLDING = (DRAINING, DRAINED)  # the phases in which a node holds a budget slot


class HistoryEntry(Protocol):
    """One write of the sandbox API server's history (``nodecycle_sandbox.kube.HistoryEntry``)."""

    @property
    def time(self) -> float: ...

    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def removed(self) -> bool: ...

    @property
    def object(self) -> dict[str, Any]: ...

    @property
    def kind(self) -> str: ...

    @property
    def unschedulable(self) -> bool: ...

    @property
    def zone(self) -> str | None: ...


class Action(Protocol):
    """A lifecycle action of the Auto Scaling emulation (``nodecycle_sandbox.aws.ActionRecord``)."""

    @property
    def instance_id(self) -> str: ...

    @property
    def transition(self) -> str: ...

    @property
    def started_at(self) -> float: ...

    @property
    def finished_at(self) -> float | None: ...


class Instance(Protocol):
    """An instance of the Auto Scaling emulation (``nodecycle_sandbox.aws.InstanceHistory``)."""

    @property
    def instance_id(self) -> str: ...

    @property
    def zone(self) -> str: ...

    @property
    def node_name(self) -> str: ...

    @property
    def terminated_at(self) -> float | None: ...


@dataclass(frozen=True)
class Span:
    phase: str
    start: float
    end: float


@dataclass(frozen=True)
class Lane:
    node: str
    zone: str
    instance_id: str
    spans: tuple[Span, ...]
    outcome: str = ""

    def span(self, phase: str) -> Span | None:
        return next((s for s in self.spans if s.phase == phase), None)


@dataclass(frozen=True)
class Timeline:
    start: float
    end: float
    lanes: tuple[Lane, ...]
    limit: int
    per_zone: int | None
    zones: tuple[str, ...] = field(default=())

    def occupancy(self, zone: str | None = None) -> list[tuple[float, int]]:
        """(time, nodes holding a slot) at each change, in the zone or in all; a slot given back at the same
        instant another is taken counts once."""
        changes = []
        for lane in self.lanes:
            if zone is not None and lane.zone != zone:
                continue
            held = [s for s in lane.spans if s.phase in HOLDING]
            if held:
                changes += [(min(s.start for s in held), +1), (max(s.end for s in held), -1)]
        steps, current = [(self.start, 0)], 0
        for time, change in sorted(changes, key=lambda c: (c[0], c[1])):  # ends before starts
            current += change
            if steps[-1][0] == time:
                steps[-1] = (time, current)
            else:
                steps.append((time, current))
        return steps

    def peak(self, zone: str | None = None) -> int:
        return max(count for _, count in self.occupancy(zone))


def build(
    *,
    history: Sequence[HistoryEntry],
    actions: Iterable[Action],
    instances: Iterable[Instance],
    replaced: Iterable[str],
    limit: int,
    per_zone: int | None,
    outcomes: Mapping[str, str] | None = None,
) -> Timeline:
    """The lanes of the ``replaced`` instances' terminate actions."""
    wanted = set(replaced)
    known = {i.instance_id: i for i in instances}
    terminations = {
        a.instance_id: a for a in actions if a.instance_id in wanted and a.transition.endswith("TERMINATING")
    }
    lanes = []
    for instance_id, action in sorted(terminations.items(), key=lambda item: item[1].started_at):
        instance = known.get(instance_id)
        if instance is None:
            continue
        lanes.append(_lane(instance, action, history, (outcomes or {}).get(instance_id, "")))
    start = min((a.started_at for a in terminations.values()), default=0.0)
    last = max((s.end for lane in lanes for s in lane.spans if s.phase != GONE), default=start)
    end = last + max(2.0, 0.15 * (last - start))  # room after the last completion for its lane's outcome
    lanes = [_clip(lane, end) for lane in lanes]
    zones = tuple(sorted({lane.zone for lane in lanes}))
    return Timeline(start, end, tuple(lanes), limit, per_zone, zones)


def _lane(instance: Instance, action: Action, history: Sequence[HistoryEntry], outcome: str) -> Lane:
    node, started = instance.node_name, action.started_at
    finished = action.finished_at if action.finished_at is not None else float("inf")
    cordoned = next(
        (
            e.time
            for e in history
            if e.kind == "Node" and e.name == node and e.unschedulable and e.time >= started
        ),
        None,
    )
    gone = _last_pod_gone(history, node, cordoned, finished) if cordoned is not None else None
    spans = []
    if cordoned is None:  # never cordoned (a node already gone): it waited until its action ended
        spans.append(Span(WAITING, started, finished))
    else:
        spans.append(Span(WAITING, started, cordoned))
        drained_at = gone if gone is not None else finished
        spans.append(Span(DRAINING, cordoned, drained_at))
        spans.append(Span(DRAINED, drained_at, finished))
    terminated = max(finished, instance.terminated_at or finished)
    spans.append(Span(GONE, terminated, float("inf")))
    return Lane(
        node, instance.zone, instance.instance_id, tuple(s for s in spans if s.end > s.start), outcome
    )


def _last_pod_gone(history: Sequence[HistoryEntry], node: str, since: float, until: float) -> float | None:
    """When the last drainable pod on ``node`` went away between ``since`` and ``until`` (None: never)."""
    present: set[str] = set()
    gone_at: float | None = since
    for entry in history:
        if entry.kind != "Pod" or entry.time > until:
            continue
        key = f"{entry.namespace}/{entry.name}"
        spec = entry.object.get("spec") or {}
        on_node = spec.get("nodeName") == node and _drainable(entry.object)
        if on_node and not entry.removed and not _terminal(entry.object):
            present.add(key)
        elif key in present:
            present.discard(key)
            if entry.time >= since:
                gone_at = entry.time
    return None if present else gone_at


def _drainable(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    if any(ref.get("kind") == "DaemonSet" for ref in meta.get("ownerReferences") or []):
        return False
    return "kubernetes.io/config.mirror" not in (meta.get("annotations") or {})


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _clip(lane: Lane, end: float) -> Lane:
    spans = tuple(Span(s.phase, s.start, min(s.end, end)) for s in lane.spans if s.start < end)
    return Lane(lane.node, lane.zone, lane.instance_id, spans, lane.outcome)
