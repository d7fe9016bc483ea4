"""A sweep within one invocation's time.

The sweeper has 300 s (its timeout). Under throttling each call is retried for seconds (botocore's standard
mode, five attempts), and a sweep over many open actions can use all of it: the runtime then ends the
invocation mid-call, and nothing after that call runs: not the parts after it (the orphans' heartbeats, which
keep alive the actions no record tells of, came after the lifecycles'), not the metrics flush, not the log of
what was left undone. So, as intake does (domain/intake_budget.py), a part starts another lifecycle, instance,
node, waiter or address only while more than a reserve is left, and says how much it left undone; the sweeper reports
the sweep cut short, and the next sweep takes it up (the lifecycles most urgent first). The calls of an item begun end
within the invocation's time too (the sweeper function's handler gives it to the clients: each call, cut to it, fails
as a transient error): one that hangs fails its item, as a throttled one does, instead of outlasting the reserve.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from nodecycle.domain.reserves import SWEEP_RESERVE

# Of the sweeper's 300 s, kept for the last item's calls and the metrics' flush (defined apart: see there)
RESERVE = SWEEP_RESERVE

# Held back for the lifecycles' repair from the orphans' keep-alive, which comes before it: a few heartbeats
# (throttled, retried) for the open actions most urgent when orphans are many (intake down through a whole instance
# refresh), and the settlement of any action at its last chance that the first part had no time for (see
# ORPHANS_SHARE).
LIFECYCLES_SHARE = timedelta(seconds=60)

# Held back for the orphans' keep-alive from the settlements of the actions at their last chance, which come first
# (see LifecycleRepair.last_chances): an orphan's heartbeat is due at every sweep, and many actions at their last
# chance at once (a stalled instance refresh), each settlement throttled and retried, would otherwise take its time.
# All but the settlements and heartbeats whose deadline comes before the orphans' part may end: those are made on this
# share (see LifecycleRepair._cannot_wait), as they would otherwise come past that deadline.
ORPHANS_SHARE = timedelta(seconds=60)

# The time held back for each part from the parts before it (the sweeper's part names). The parts after the
# lifecycles' get a share each too: a repair with more to do than a sweep has time for (a stalled queue under
# throttling) would otherwise use the time down to the reserve at every sweep, and the adoptions, the stale
# budget entries, the annotations and the dangling addresses (invariant 4) would never be reached. Each share
# is a few calls with their retries; what one part leaves undone the next sweep takes up.
SHARES = {
    "orphans": ORPHANS_SHARE,
    "lifecycles": LIFECYCLES_SHARE,
    "adoptions": timedelta(seconds=20),
    "budget": timedelta(seconds=15),
    "annotations": timedelta(seconds=15),
    "addresses": timedelta(seconds=20),
}


class OutOfTime(Exception):
    """A part stopped with work left, too little time being left to start more: the next sweep takes it up."""


class SweepEnd:
    """The latest a sweep may end, as one of its parts set it (``SweepTime.end_within``), shared by the times of all
    its parts: the seconds of the invocation left then (0: the invocation's own end)."""

    def __init__(self) -> None:
        self.left_at_end = 0.0


class SweepTime:
    """The time a part may use: the invocation's remaining time less a reserve, and less the shares held back
    for the parts after it; no more than the sweep's end, when a part set one (``end_within``). ``late``: how long
    after its schedule the sweep started (see ``Sweeper.sweep``): the next sweep may come as late, and what it would
    then reach too late is the part's to do now."""

    def __init__(
        self,
        time_left: Callable[[], float],
        reserve: timedelta,
        *,
        held_back: timedelta = timedelta(),
        late: timedelta = timedelta(),
        end: SweepEnd | None = None,
        next_share: timedelta = timedelta(),
    ) -> None:
        self._time_left = time_left
        self._reserve = reserve.total_seconds()
        self._held_back = held_back.total_seconds()
        # (of ``held_back``, the share of the part right after this one: see ``enough_before_the_next``)
        self._next_share = min(next_share.total_seconds(), self._held_back)
        self.late = late
        self._end = end if end is not None else SweepEnd()

    @property
    def reserve(self) -> timedelta:
        """What an item's calls may take, retried (an item starts only with more than this left)."""
        return timedelta(seconds=self._reserve)

    def sweep_left(self) -> float:
        """Seconds left until the sweep ends at the latest: the invocation's, or less once a part set an end."""
        return self._time_left() - self._end.left_at_end

    def end_within(self, seconds: float) -> None:
        """Have the sweep end within ``seconds`` from now: no part starts an item after that less the reserve (the
        lifecycles' part, so that the next sweep comes in time for a stalled action's last chance)."""
        self._end.left_at_end = max(self._end.left_at_end, self._time_left() - max(seconds, 0.0))

    def invocation_left(self) -> float:
        """Seconds left of the invocation's time (the reserve and the shares included): when its calls end."""
        return self._time_left()

    def enough(self) -> bool:
        """Whether another item may be started: one that ends before the sweep's end, if a part set one."""
        left = self._time_left()  # (read once: one look at the invocation's clock per item)
        return left >= self._reserve + self._held_back and left - self._end.left_at_end >= self._reserve

    def enough_before_the_next(self) -> bool:
        """Whether an item that cannot wait for the part after this one may be started all the same, on that part's
        share (``next_share``): one the next part would push past its deadline. The shares of the parts after that
        one, the reserve and the sweep's end are kept."""
        left = self._time_left()
        after_next = self._held_back - self._next_share
        return left >= self._reserve + after_next and left - self._end.left_at_end >= self._reserve

    def next_part_ends_within(self) -> float:
        """Seconds within which the part after this one ends at the latest, this one stopping now: it starts items
        while the reserve and the shares after it are left, or until the sweep's end less the reserve, and its
        last item's calls take up to the reserve."""
        left = self._time_left()
        return min(left - (self._held_back - self._next_share), left - self._end.left_at_end)

    def enough_to_finish(self) -> bool:
        """Whether the rest of an item begun may be done: what a write a part made leaves to do (the wake-ups
        of the waiters the budget's write passed slots on to), which the parts after it may wait for. Only the
        reserve is kept: an item half done (a slot written as a waiter's, the waiter not told) costs more than
        the few seconds its calls take from the parts after it."""
        return self._time_left() >= self._reserve

    def cut_short(self, left_undone: str) -> OutOfTime:
        left = self._time_left()
        ends = (
            f" (the sweep to end within {left - self._end.left_at_end:.1f} s)"
            if self._end.left_at_end
            else ""
        )
        return OutOfTime(f"{left:.1f} s were left{ends}: too little to start another; {left_undone}")
