"""The nodes the parts of one sweep share: listed once in a sweep, listed again in the next."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.cluster import Claim, NodeInfo
from nodecycle.domain.sweep.nodes import SweepNodes
from nodecycle.domain.sweep.sweep_time import SHARES, SweepTime
from nodecycle.domain.sweep.sweeper import Counts, Sweeper
from tests.support.fakes import FakeClock, FakeMetrics, InMemoryRecords
from tests.unit.sweeper.test_sweeper import annotated


@dataclass
class ListedNodes:
    nodes: list[NodeInfo]
    lists: int = 0
    released: list[str] = field(default_factory=list)

    def node_metadata(self) -> list[NodeInfo]:
        self.lists += 1
        return list(self.nodes)

    def nodes_now(self, names: Collection[str]) -> set[str]:
        return set(names) & {node.name for node in self.nodes}

    def release_node(self, node: NodeInfo, *, uncordon: bool = False) -> Claim:
        self.released.append(node.name)
        return Claim.CLAIMED


def test_the_parts_of_a_sweep_share_one_node_list_and_the_next_sweep_lists_them_again() -> None:
    # Given a cluster of two nodes, one annotated by this owner, and two parts that need the nodes
    cluster = ListedNodes([annotated("n1", "stack-a", "i-1", "t1"), annotated("n2", "stack-b", "i-2", "t2")])
    nodes = SweepNodes(cluster)
    seen: list[object] = []

    def names(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        seen.append(nodes.node_names())
        return {}

    def owned(open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        seen.append([node.name for node in nodes.nodes_owned_by("stack-a")])
        return {}

    sweeper = Sweeper(
        owner="stack-a",
        records=InMemoryRecords(),
        clock=FakeClock(),
        metrics=FakeMetrics(),
        parts={"budget": names, "annotations": owned},
        shares=SHARES,
        fresh=[nodes.forget],
    )

    # When it sweeps, a node joins, and it sweeps again
    sweeper.sweep(time_left=lambda: 300)
    cluster.nodes.append(annotated("n3", "stack-a", "i-3", "t3"))
    sweeper.sweep(time_left=lambda: 300)

    # Then each sweep listed the nodes once, for both parts, and the second saw the node that joined
    assert cluster.lists == 2
    assert seen == [{"n1", "n2"}, ["n1"], {"n1", "n2", "n3"}, ["n1", "n3"]]
