"""The refresh timeline's phases and budget counts, from records shaped as the sandbox keeps them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nodecycle_cli.timeline import DRAINED, DRAINING, GONE, WAITING, build
from nodecycle_cli.timeline_plot import write
from nodecycle_sandbox.aws.records import TERMINATING, ActionRecord, InstanceHistory
from nodecycle_sandbox.kube import HistoryEntry

T0 = 1_000_000.0
ZONE = "topology.kubernetes.io/zone"


class History:
    def __init__(self) -> None:
        self.entries: list[HistoryEntry] = []

    def _add(self, time: float, kind: str, name: str, obj: dict[str, Any], removed: bool = False) -> None:
        self.entries.append(
            HistoryEntry(
                resource_version=len(self.entries) + 1,
                time=T0 + time,
                verb="update",
                resource=kind.lower() + "s",
                namespace="shop" if kind == "Pod" else "",
                name=name,
                source="api",
                removed=removed,
                object={"kind": kind, **obj},
            )
        )

    def node(self, time: float, name: str, zone: str, *, cordoned: bool, removed: bool = False) -> None:
        meta = {"name": name, "labels": {ZONE: zone}}
        self._add(time, "Node", name, {"metadata": meta, "spec": {"unschedulable": cordoned}}, removed)

    def pod(self, time: float, name: str, node: str, *, removed: bool = False, daemon: bool = False) -> None:
        owners = (
            [{"kind": "DaemonSet", "name": "agent"}] if daemon else [{"kind": "ReplicaSet", "name": "web"}]
        )
        meta = {"name": name, "ownerReferences": owners}
        self._add(time, "Pod", name, {"metadata": meta, "spec": {"nodeName": node}}, removed)


def action(instance: str, start: float, end: float) -> ActionRecord:
    return ActionRecord(
        token=f"t-{instance}",
        group="workers",
        hook="nodecycle-terminate",
        instance_id=instance,
        transition=TERMINATING,
        default_result="CONTINUE",
        heartbeat_timeout=600,
        global_timeout=60000,
        started_at=T0 + start,
        finished_at=T0 + end,
        result="CONTINUE",
        outcome="completed",
    )


def instance(instance_id: str, node: str, zone: str, terminated: float) -> InstanceHistory:
    return InstanceHistory(
        instance_id, "workers", zone, node, launched_at=T0 - 100, terminated_at=T0 + terminated
    )


def scenario() -> tuple[History, list[ActionRecord], list[InstanceHistory]]:
    """Two nodes of zone a and one of zone b; a's second waits for the first to give its slot back."""
    history = History()
    for name, zone in (("a1", "a"), ("a2", "a"), ("b1", "b")):
        history.node(0, name, zone, cordoned=False)
        history.pod(0, f"web-{name}", name)
        history.pod(0, f"agent-{name}", name, daemon=True)  # DaemonSet pods are not drained
    history.node(1, "a1", "a", cordoned=True)
    history.node(1, "b1", "b", cordoned=True)
    history.pod(3, "web-a1", "a1", removed=True)
    history.pod(4, "web-b1", "b1", removed=True)
    history.node(5, "a2", "a", cordoned=True)  # a1's action was completed at 4.5
    history.pod(8, "web-a2", "a2", removed=True)
    actions = [action("i-a1", 0, 4.5), action("i-a2", 0, 9), action("i-b1", 0, 4.8)]
    instances = [
        instance("i-a1", "a1", "a", 4.6),
        instance("i-a2", "a2", "a", 9.5),
        instance("i-b1", "b1", "b", 4.9),
    ]
    return history, actions, instances


def test_each_lane_goes_through_its_phases_as_the_records_say() -> None:
    history, actions, instances = scenario()

    timeline = build(
        history=history.entries,
        actions=actions,
        instances=instances,
        replaced={"i-a1", "i-a2", "i-b1"},
        limit=2,
        per_zone=1,
        outcomes={"i-a2": "drained"},
    )

    lanes = {lane.instance_id: lane for lane in timeline.lanes}
    a2 = [(s.phase, s.start - T0, s.end - T0) for s in lanes["i-a2"].spans]
    assert a2 == [(WAITING, 0, 5), (DRAINING, 5, 8), (DRAINED, 8, 9), (GONE, 9.5, timeline.end - T0)]
    assert [s.phase for s in lanes["i-a1"].spans] == [WAITING, DRAINING, DRAINED, GONE]
    assert lanes["i-a2"].outcome == "drained"
    assert timeline.zones == ("a", "b")


def test_slots_are_counted_in_all_and_per_zone() -> None:
    history, actions, instances = scenario()
    timeline = build(
        history=history.entries,
        actions=actions,
        instances=instances,
        replaced={"i-a1", "i-a2", "i-b1"},
        limit=2,
        per_zone=1,
    )
    # a1 and b1 hold slots from 1 to 4.5 and 4.8; a2 from 5 to 9
    assert (timeline.peak(), timeline.peak("a"), timeline.peak("b")) == (2, 1, 1)
    assert [(t - T0, n) for t, n in timeline.occupancy("a")] == [(0, 0), (1, 1), (4.5, 0), (5, 1), (9, 0)]


def test_the_picture_and_the_page_say_whether_the_budget_held(tmp_path: Path) -> None:
    history, actions, instances = scenario()
    # Given the same records judged against limits they keep (2 in all) and break (1 in all)
    kept = build(
        history=history.entries,
        actions=actions,
        instances=instances,
        replaced={"i-a1", "i-a2", "i-b1"},
        limit=2,
        per_zone=1,
    )
    broken = build(
        history=history.entries,
        actions=actions,
        instances=instances,
        replaced={"i-a1", "i-a2", "i-b1"},
        limit=1,
        per_zone=1,
    )

    png, page = write(kept, tmp_path / "kept.png", tmp_path / "kept.html", "refresh")
    write(broken, tmp_path / "broken.png", tmp_path / "broken.html", "refresh")

    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "<h1>refresh: the budget held at every moment</h1>" in page.read_text()
    assert "<h1>refresh: THE BUDGET WAS EXCEEDED</h1>" in (tmp_path / "broken.html").read_text()
