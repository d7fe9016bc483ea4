"""A new budget document seeded with the drains in progress that the nodes show.

The budget's ConfigMap may hold no document while drains are in progress: deleted (`kubectl delete`, a
namespace re-created by GitOps, an operator "resetting" a stuck budget) and created again empty, as
``deploy/rbac.yaml`` ships it. Its holders are forgotten then, but not their drains, which go on cordoning and
evicting: counted nowhere, they would leave room for new grants past the limits until their next renewals
found their slots gone (invariant 1). Each of them still marks its node: the cordon, and the owner and
in-progress annotations that name its lifecycle (instance, transition, token), set in the claim's one PATCH
and cleared in one. So the first write to a document never written lists the nodes once and takes each drain
in progress as a holder of its own lifecycle and owner, whichever owner it is (the budget is shared: another
stack's drain takes a slot in every stack's view), before it decides anything. Each one's next ask then
finds its slot held, as before the deletion, when it fits beside the other holders (see below). A drain whose
node object was deleted under it (its pods still bound to the name: drain/orphans.py) has no node to show it: the
writing owner's own are read from its open records (``Lifecycles.drains``); another owner's such drain is counted
at its next poll's renewal, which pauses it when its room is gone. That costs one list of the nodes' metadata when a document is created
(the first use, or a deletion), never per decision: a decision's cost stays flat in the cluster's size.

What the nodes cannot tell, the seed takes on the safe side:

- a drain that had lost its slot (cordoned, waiting in progress) is a holder too: its node is disrupted
  already, and counted so no new drain starts beside it until the drains in progress are under the limits.
  But the node does not tell it from the drain that took its slot, so a seeded holder is marked (``seeded``)
  until its lifecycle asks again, and that ask is judged as a drain's that lost its slot: it keeps the slot
  only if it fits beside every other holder, seeded ones included, and otherwise pauses in line with
  precedence. Were it renewed as held, every paused drain would resume at once, past the limits; judged
  so, the drains over the limits pause (those that ask first: no guess at which of them were draining);
- a stale annotation (a drain over whose cleanup has not cleared it yet, the sweeper not yet run) holds a slot
  that nobody renews: it expires after one TTL, or sooner when its owner's sweeper finds its lifecycle over
  or its instance gone, as any holder's;
- a node in progress with no owner (left for a lifecycle to adopt) names no stack to hold it: left out, as it
  is to every owner's decisions until the adopter's own slot is granted.

A document the store cannot vouch for (``BudgetDocument.unvouched``: a ConfigMap restored from a backup, or
re-applied with an old document in it) is seeded the same way, after its expired entries go: its live entries
stand, and each drain in progress on a node it names nowhere is a seeded holder. (A live waiter it names keeps
that node out of the seed: a backup younger than a waiter's TTL whose node's drain took its slot since.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from nodecycle.domain.budget.document import BudgetDocument, Holder
from nodecycle.domain.budget.rules import MAX_DOCUMENT_BYTES


@dataclass(frozen=True)
class DrainInProgress:
    """A drain as its node shows it: the owner and in-progress annotations."""

    node: str
    zone: str | None
    owner: str
    instance_id: str
    record_id: str  # the lifecycle the in-progress annotation names
    token: str
    started: datetime | None  # when its drain began (the annotation's ``started``); None: unreadable


class DrainsInProgress(Protocol):
    def drains_in_progress(self) -> list[DrainInProgress]:
        """The drains in progress on the cluster's nodes, of every owner, in or out of any scope (one list)."""
        ...


def seeded(
    doc: BudgetDocument, drains: Iterable[DrainInProgress], *, now: datetime, ttl: timedelta
) -> tuple[BudgetDocument, tuple[Holder, ...]]:
    """``doc`` (never written, or not vouched for: pruned) with a holder for each drain in progress on a node it names nowhere, renewed
    ``now`` for ``ttl``; and those holders. Oldest drains first, and only as many as keep the document under
    ``MAX_DOCUMENT_BYTES``: past it, a write would fail every write after it."""
    named = {e.node for e in doc.entries()}
    size = len(doc.to_json())
    holders: list[Holder] = []
    for drain in sorted(drains, key=lambda d: (d.started is None, d.started or now, d.node)):
        if drain.node in named:
            continue
        holder = Holder(
            node=drain.node,
            instance_id=drain.instance_id,
            zone=drain.zone,
            owner=drain.owner,
            record_id=drain.record_id,
            token=drain.token,
            renewed_at=now,
            ttl_seconds=int(ttl.total_seconds()),
            acquired_at=min(drain.started, now) if drain.started is not None else now,
            seeded=True,
        )
        size += BudgetDocument.entry_bytes(holder)
        if size > MAX_DOCUMENT_BYTES:
            break
        named.add(drain.node)
        holders.append(holder)
    seed = doc.model_copy(
        update={"holders": (*doc.holders, *holders), "unwritten": False, "unvouched": False}
    )
    return seed, tuple(holders)
