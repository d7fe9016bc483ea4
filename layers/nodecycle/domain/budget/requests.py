"""What a drain asks of the budget, and what it answers."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


@dataclass(frozen=True)
class SlotRequest:
    node: str
    instance_id: str
    zone: str | None  # topology.kubernetes.io/zone; None when unknown (counts against every zone)
    owner: str
    record_id: str  # the lifecycle record, so that a releaser can wake this waiter


class SlotReason(StrEnum):
    GRANTED = "granted"  # a new slot
    HELD = "held"  # the node already held its slot: renewed
    REACQUIRED = "reacquired"  # the holder had expired and been removed; there was room again
    NO_ROOM = "no-room"  # waiting (see position)
    LOST = "lost"  # the holder had expired and been removed, and there is no room now: waiting
    HELD_BY_OTHER_OWNER = "held-by-other-owner"  # another stack holds this node: hands off
    CLAIMED_BY_OTHER_OWNER = "claimed-by-other-owner"  # another stack waits for this node: hands off


@dataclass(frozen=True)
class SlotDecision:
    granted: bool
    reason: SlotReason
    holders: int  # live holders of all owners after this decision
    waiting: int  # live waiters of all owners after this decision
    position: int | None  # 1-based place among the waiters when waiting; None when granted or handed off
