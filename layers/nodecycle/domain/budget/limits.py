"""A stack's budget limits, and how they resolve against the nodes in its scope."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
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
    of a zone of 8 nodes is 2, whatever the other zones hold. ``leaving``: nodes listed whose instance is
    going or gone (see :func:`in_scope`).
    """

    max_unavailable: Quantity
    max_unavailable_per_zone: Quantity | None = None

    @property
    def has_percent(self) -> bool:
        per_zone = self.max_unavailable_per_zone
        return self.max_unavailable.percent or (per_zone is not None and per_zone.percent)

    def resolve(self, nodes: Sequence[NodeState], leaving: Collection[str] = ()) -> ResolvedLimits:
        nodes = in_scope(nodes, leaving)
        per_zone = self.max_unavailable_per_zone
        zone_limits = None
        if per_zone is not None:
            sizes = Counter(node.zone for node in nodes if node.zone is not None)
            zone_limits = ZoneLimits(
                by_zone={zone: per_zone.resolve(size) for zone, size in sorted(sizes.items())},
                other=per_zone.resolve(0),
            )
        return ResolvedLimits(total=self.max_unavailable.resolve(len(nodes)), per_zone=zone_limits)


def in_scope(nodes: Sequence[NodeState], leaving: Collection[str] = ()) -> list[NodeState]:
    """The nodes a percent limit is of: those that can serve, or that a drain took out of service.

    Not those of stopped instances (see :class:`NodeState`), nor those ``leaving``: the nodes the budget
    shows drained and given back (:func:`rules.leaving`), whose instance their lifecycle ended. Their node
    objects outlive the instances (until the cloud provider deletes them, seconds to a minute later), and
    in a refresh, with the new nodes joining, they would grow a percent past the nodes really there: 4
    running and 2 lingering, 50% would let 3 of the 4 go. A PodDisruptionBudget's percent is likewise of
    the pods its controller wants, not of those being deleted. They are not counted as unavailable either
    (:func:`rules.counted_unavailable` excuses them), so a refresh always has room.
    """
    return [node for node in nodes if not node.shut_down and node.name not in leaving]


def owner_limits(
    limits: BudgetLimits,
    *,
    count_unavailable: bool,
    nodes: Sequence[NodeState] | None,
    now: datetime,
    leaving: Collection[str] = (),
) -> OwnerLimits:
    """What a writer records about itself. ``nodes`` is None when it needed no node list; ``leaving``: see
    :func:`in_scope`."""
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
        nodes_in_scope=None if nodes is None else len(in_scope(nodes, leaving)),
        resolved=limits.resolve(nodes or (), leaving),
        unavailable=unavailable,
        updated_at=now,
    )
