"""What a drain asks of the budget, and what it answers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


@dataclass(frozen=True)
class SlotRequest:
    node: str
    instance_id: str
    zone: str | None  # topology.kubernetes.io/zone; None when unknown (counts against every zone)
    owner: str
    record_id: str  # the lifecycle record, so that a releaser can wake this waiter
    # The lifecycle's token: a record of a disruption (one per instance and cause) starts over under another
    # one (a Spot instance interrupted again, the next maintenance), which is not the lifecycle that released
    token: str | None = None
    # When the lifecycle began (its record was written): a mark of a slot given back refuses only the lifecycle
    # as it was when it gave it back, not one that starts over later on the same record and token (an adopted
    # lifecycle, whose token is its hook's). None: not told, any delivery of the record and token is refused.
    since: datetime | None = None
    # Since when the lifecycle has waited in line for the node (its record's), if it waits: a document created
    # since (its ConfigMap deleted and created again) lost its place, which it takes back when it joins that
    # document's line (first come, first served), rather than join behind the nodes that asked first since.
    waiting_since: datetime | None = None
    # The node is cordoned and partly drained already (a drain that lost its slot asks for it back): it is
    # disruption in progress, and goes before nodes not yet touched.
    in_progress: bool = False
    # From then on the action's global timeout is near: the node goes before the others that wait.
    urgent_at: datetime | None = None
    # The node goes either way (its action's global timeout is too near to wait any longer): take a slot
    # even without room, so that the others count it.
    force: bool = False
    # The other stack whose claim the node carries (its nodecycle.io/owner annotation, as the asker read it), when
    # that claim may still be a drain in progress; None: none, or this owner's. A budget that owner writes nothing
    # in (no limits of its own recorded: it keeps a budget of its own, in another BudgetNamespace, or has not
    # written this one for LIMITS_RETENTION) cannot tell whether its drain is alive: no slot is taken for the node
    # (CLAIMED_ELSEWHERE). One that writes here and holds no slot nor place for the node has let go of it.
    claimed_by: str | None = None


class SlotReason(StrEnum):
    GRANTED = "granted"  # a new slot
    HELD = "held"  # the node already held its slot: renewed
    REACQUIRED = "reacquired"  # the holder had expired and been removed; there was room again
    NO_ROOM = "no-room"  # waiting (see position)
    QUEUE_FULL = "queue-full"  # no room, and the queue holds its maximum of waiters: ask again later
    LOST = "lost"  # the holder had expired and been removed, and there is no room now: waiting
    FORCED = "forced"  # granted without room: the node goes either way
    HELD_BY_OTHER_OWNER = "held-by-other-owner"  # another stack holds this node: hands off
    CLAIMED_BY_OTHER_OWNER = "claimed-by-other-owner"  # another stack waits for this node: hands off
    # The node carries the claim of another stack that writes nothing in this budget (see SlotRequest.claimed_by):
    # its drain may be alive, under a budget of its own: hands off
    CLAIMED_ELSEWHERE = "claimed-elsewhere"
    # Another lifecycle of this owner holds this node (a Spot interruption's drain, a terminate hook's): one
    # slot is one lifecycle's, released by its own cleanup; this one waits in line for the node, and that
    # release wakes it when it may go.
    HELD_BY_OTHER_LIFECYCLE = "held-by-other-lifecycle"
    # This lifecycle gave its slot back already (its cleanup ran): the request is a late delivery of one of
    # its earlier steps, whose commit will lose. A slot taken now would be recorded nowhere and held until
    # the sweeper or the TTL removed it.
    RELEASED = "released"


@dataclass(frozen=True)
class SlotDecision:
    granted: bool
    reason: SlotReason
    holders: int  # live holders of all owners after this decision
    waiting: int  # live waiters of all owners after this decision
    position: int | None  # 1-based place among the waiters when waiting; None when granted or handed off
    # Of the waiters before it in line, those that may take the slot it needs (not those of another zone under
    # a per-zone limit: a slot of theirs is not its turn); None when not waiting. What its asks are paced by.
    ahead: int | None = None
    # The slots its owner's limits give the waiters counted in ``ahead`` (the total, and the per-zone limit of
    # its zone: the slots that turn over for it, whoever holds them now); None when not waiting. ``ahead``
    # over it is how many rounds of drains stand before its turn.
    room: int | None = None
    # Record ids of this owner's waiters that take the room the decision's write added (it removed expired
    # entries, as every write does; an ask that frees nothing adds none): wake them, as a release's are woken
    wake: tuple[str, ...] = ()
    # A new slot that the budget cannot tell from a late delivery of a lifecycle that gave it back: the document
    # was created again since the lifecycle began, and the mark of its release (see RELEASED) may have gone with
    # the one before. The asker's record tells: a lifecycle found over gives the slot back at once.
    unmarked: bool = False
    # For a first ask: the slot held is one its lifecycle took in a document created again since it began (not
    # seeded), maybe by a late delivery whose give-back failed: the asker's record tells, as for ``unmarked``
    held_unmarked: bool = False
