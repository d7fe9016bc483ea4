"""Completion claims on open lifecycles, for ``nodecycle status`` and the doctor.

Every completer (the engine's COMPLETE step, the sweeper's settlement) writes a claim on the lifecycle's record
before it calls CompleteLifecycleAction, and clears it when it records what the call did (engine.py,
``claimed_for_completion``). A claim still there once the heartbeat margin has passed is a completer that
vanished (killed by its Lambda timeout, its commit refused): the next delivery of the step, or the sweeper's
next resend, takes it over. Until then the lifecycle shows at COMPLETE with its step due: the claim says why
nothing moves, and when something will.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from nodecycle.domain.engine import COMPLETION_CLAIM, claim_ends

if TYPE_CHECKING:
    from nodecycle.domain.model import LifecycleRecord

# The outcome the sweeper's settlement gives an action it completes from a step before COMPLETE: its claim is the
# sweeper's. A claim on an action already at COMPLETE is the engine's, or a settlement that kept the action's own
# outcome, which the record does not tell apart unless the claim names its completer (``by``).
SETTLED_BY_SWEEPER = "settled-by-sweeper"


@dataclass(frozen=True)
class Claim:
    record: LifecycleRecord
    by: str  # who claimed: "sweeper", "engine", or "engine or sweeper" when the record does not tell
    at: datetime  # when
    takeover_at: datetime  # from when another completer may take it over (its completer is taken as gone)
    over: bool  # it took over the claim of a completer that had vanished

    def taken_over_in(self, now: datetime) -> timedelta:
        """How long until it may be taken over (negative: past that)."""
        return self.takeover_at - now


def claims(records: list[LifecycleRecord], margin: timedelta) -> list[Claim]:
    """The claims at work on ``records`` (the completer may still be calling Auto Scaling, or vanished), oldest
    first. ``margin``: the stack's heartbeat margin, what a completer's step may take."""
    found = []
    for record in records:
        ends = claim_ends(record, margin)
        if ends is None:
            continue
        claim: dict[str, Any] = record.extra[COMPLETION_CLAIM]
        found.append(
            Claim(
                record=record,
                by=_by(record, claim),
                at=datetime.fromisoformat(str(claim["at"])),
                takeover_at=ends,
                over=bool(claim.get("over")),
            )
        )
    return sorted(found, key=lambda c: c.at)


def _by(record: LifecycleRecord, claim: dict[str, Any]) -> str:
    named = claim.get("by")
    if isinstance(named, str) and named:
        return named
    return "sweeper" if record.outcome == SETTLED_BY_SWEEPER else "engine or sweeper"
