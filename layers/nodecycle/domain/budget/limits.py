"""A stack's budget limits, and how they resolve against the nodes in its scope."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
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

    ``released``: a drain's cleanup marked the node released for its lifecycle (``nodecycle.io/released-for``):
    its instance leaves service (terminating, into its warm pool) and the node object lingers until the cloud
    provider deletes it. The budget's own marks of slots given back say the same (:func:`rules.leaving`), but go
    with its ConfigMap; the node's mark outlives a re-creation, so a percent is still of the nodes that serve.
    Nor is it unavailable, as the budget's mark excuses it (:func:`rules.counted_unavailable`): a node out of the
    total never takes a slot. The budget's mark lasts a TTL, the node's as long as the node is listed, cordoned:
    for an instance waiting in a Running warm pool, or ahead of the scheduled maintenance it was drained for, or
    a node a rebalance recommendation's cordon left (its pods still running), hours or days. Counted, each such node took a slot of every stack counting unavailable nodes a TTL after its
    release and kept it, as a Stopped pool's would (see ``shut_down``), and the drains behind waited until their
    global timeouts forced them (tests/integration/budget/test_released_nodes_counting_unavailable.py).
    """

    name: str
    zone: str | None
    schedulable: bool
    ready: bool
    shut_down: bool = False
    released: bool = False

    @property
    def unavailable(self) -> bool:
        return not (self.shut_down or self.released) and not (self.schedulable and self.ready)


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
    (:func:`rules.counted_unavailable` excuses them), so a refresh always has room. Nor those whose node
    says so (``released``), which a ConfigMap created again no longer tells.
    """
    return [node for node in nodes if not (node.shut_down or node.released) and node.name not in leaving]


def owner_limits(
    limits: BudgetLimits,
    *,
    count_unavailable: bool,
    nodes: Sequence[NodeState] | None,
    now: datetime,
    leaving: Collection[str] = (),
    decisive: Decisive | None = None,
) -> OwnerLimits:
    """What a writer records about itself. ``nodes`` is None when it needed no node list; ``leaving``: see
    :func:`in_scope`. ``decisive``: record only the unavailable nodes that can change a decision (see
    :func:`decisive_unavailable`); None: all of them (a picture for people, not written)."""
    resolved = limits.resolve(nodes or (), leaving)
    unavailable = [n for n in nodes if n.unavailable] if count_unavailable and nodes is not None else []
    if decisive is not None:
        unavailable = decisive_unavailable(unavailable, resolved, decisive)
    per_zone = limits.max_unavailable_per_zone
    return OwnerLimits(
        max_unavailable=str(limits.max_unavailable),
        max_unavailable_per_zone=None if per_zone is None else str(per_zone),
        count_unavailable=count_unavailable,
        nodes_in_scope=None if nodes is None else len(in_scope(nodes, leaving)),
        resolved=resolved,
        unavailable=tuple(NodeRef(name=n.name, zone=n.zone) for n in unavailable),
        updated_at=now,
    )


@dataclass(frozen=True)
class Decisive:
    """What the budget document tells of the nodes whose unavailability counts by name (see
    :func:`decisive_unavailable`)."""

    named: Collection[str]  # the nodes of its holders, waiters and marks, and the node asking now
    uncounted: Collection[str]  # those its occupancy does not count as unavailable: held, or leaving


def decisive_unavailable(
    unavailable: Sequence[NodeState], resolved: ResolvedLimits, decisive: Decisive
) -> list[NodeState]:
    """The nodes of ``unavailable`` that can change a decision under ``resolved``: every node the document
    names, and of the others, only as many as the limits can tell apart.

    Every owner's unavailable nodes are in every write, and nothing else bounds them: in a zone outage of a
    5,000-node cluster each counting stack recorded 1,667 (73 bytes each), and two of them took a document at
    its bound past the API server's 1 MiB, refused (422) at every write, every drain stuck at its slot. The
    replay reads an owner's unavailable nodes in two ways (:class:`.rules.Occupancy`): by name, whether a
    node is counted already (it takes no new slot) -- only the nodes in line or held, or the one asking, whose
    owner writes its limits again when it joins; and by count, against the total and each zone's limit --
    where past a limit one more node changes nothing (the load of a zone is its nodes and those of unknown
    zone). So the unnamed nodes kept are: those of unknown zone while the total has room; each zone's while
    its load is under its limit; then any while the total has room (by name, so that successive writes keep
    the same ones). Each of the occupancy's answers is then what it is with every node recorded, and an
    owner records at most its total limit and its zones' limits of nodes the document does not name."""
    named = [n for n in unavailable if n.name in decisive.named]
    counted = Counter(n.zone for n in named if n.name not in decisive.uncounted)
    rest = sorted((n for n in unavailable if n.name not in decisive.named), key=lambda n: n.name)
    kept: dict[str, NodeState] = {}

    def keep(wanted: Callable[[NodeState], bool]) -> None:
        for node in rest:
            if node.name not in kept and wanted(node):
                kept[node.name] = node
                counted[node.zone] += 1

    keep(lambda n: n.zone is None and counted.total() < resolved.total)
    per_zone = resolved.per_zone
    if per_zone is not None:
        keep(lambda n: n.zone is not None and counted[None] + counted[n.zone] < per_zone.of(n.zone))
    keep(lambda _: counted.total() < resolved.total)
    return [*named, *sorted(kept.values(), key=lambda n: n.name)]
