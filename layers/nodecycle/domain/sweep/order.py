"""The sweep's parts in the order they run (see :mod:`.sweeper` for why), named as its shares of time name them
(``sweep_time.SHARES``)."""

from __future__ import annotations

from collections.abc import Mapping

from nodecycle.domain.sweep.lifecycles import LifecycleRepair
from nodecycle.domain.sweep.sweeper import SweepPart


def sweep_parts(
    *,
    keep_alive: SweepPart,
    repair: LifecycleRepair,
    adopt: SweepPart,
    cluster: Mapping[str, SweepPart],
    addresses: SweepPart,
) -> dict[str, SweepPart]:
    """The parts of a sweep, in their order: the settlements of the open actions at their last chance, and the
    heartbeats that cannot wait for the orphans' part (``repair``'s ``last_chances``: before any part whose length
    would push them past their deadline), the orphans' keep-alive (``keep_alive``), the lifecycles' ``repair`` (all
    but those the first part reached), the orphans' adoptions (``adopt``), the parts that act on the cluster
    (``cluster``: the budget's, the annotations'; none for a fleet without Kubernetes), and the ``addresses``'
    (always: addresses left from when EIPs were on still need freeing)."""
    return {
        "last-chances": repair.last_chances,
        "orphans": keep_alive,
        "lifecycles": repair,
        "adoptions": adopt,
        **cluster,
        "addresses": addresses,
    }
