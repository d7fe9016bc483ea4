"""A stack's budget limits, and how they resolve against the nodes in its scope."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from nodecycle.domain.budget.document import NodeRef, OwnerLimits, ResolvedLimits, ZoneLimits
from nodecycle.domain.policy import Quantity


@dataclass(frozen=True)
class NodeState:
    """What the budget needs to know of one node in scope.

    ``shut_down``: its instance is stopped (the cloud provider's shutdown taint): into a Stopped warm pool, or
    by an operator. Its node object stays, NotReady, for as long as the instance is stopped, which may be for
    good. It is not capacity a disruption took from the cluster, and no drain of it is under way, so it is
    neither unavailable nor in scope: counted, it would shrink every counting owner's budget by one per pooled
    instance for as long as the instance waits in the pool, and grow a percent limit with capacity that does
    not run.
    """

    name: str
    zone: str | None
    schedulable: bool
    ready: bool
    shut_down: bool = False

    @property
    def unavailable(self) -> bool:
        return not self.shut_down and not (self.schedulable and self.ready)


@dataclass(frozen=True)
class BudgetLimits:
    """``maxUnavailable`` over the nodes in scope, and ``maxUnavailablePerZone`` over those of each zone.

    A percent rounds up and is at least 1. A per-zone percent is of the nodes in scope *in that zone*: "25%"
    of a zone of 8 nodes is 2, whatever the other zones hold.
    """

    max_unavailable: Quantity
    max_unavailable_per_zone: Quantity | None = None

    @property
    def has_percent(self) -> bool:
        per_zone = self.max_unavailable_per_zone
        return self.max_unavailable.percent or (per_zone is not None and per_zone.percent)

    def resolve(self, nodes: Sequence[NodeState]) -> ResolvedLimits:
        nodes = in_scope(nodes)
        per_zone = self.max_unavailable_per_zone
        zone_limits = None
        if per_zone is not None:
            sizes = Counter(node.zone for node in nodes if node.zone is not None)
            zone_limits = ZoneLimits(
                by_zone={zone: per_zone.resolve(size) for zone, size in sorted(sizes.items())},
                other=per_zone.resolve(0),
            )
        return ResolvedLimits(total=self.max_unavailable.resolve(len(nodes)), per_zone=zone_limits)


def in_scope(nodes: Sequence[NodeState]) -> list[NodeState]:
    """The nodes a percent limit is of: not those of stopped instances (see :class:`NodeState`)."""
    return [node for node in nodes if not node.shut_down]


def owner_limits(
    limits: BudgetLimits, *, count_unavailable: bool, nodes: Sequence[NodeState] | None, now: datetime
) -> OwnerLimits:
    """What a writer records about itself. ``nodes`` is None when it needed no node list."""
    unavailable = (
        tuple(NodeRef(name=n.name, zone=n.zone) for n in nodes if n.unavailable)
        if count_unavailable and nodes is not None
        else ()
    )
    per_zone = limits.max_unavailable_per_zone
    return OwnerLimits(
        max_unavailable=str(limits.max_unavailable),
        max_unavailable_per_zone=None if per_zone is None else str(per_zone),
        count_unavailable=count_unavailable,
        nodes_in_scope=None if nodes is None else len(in_scope(nodes)),
        resolved=limits.resolve(nodes or ()),
        unavailable=unavailable,
        updated_at=now,
    )
