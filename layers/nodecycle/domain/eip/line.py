"""The line of launches waiting for an address of a pool (in allocate mode, for the account's address quota):
first come, first served.

A launch that finds its pool empty looks again later (see ``AssignAddress._exhausted``). Without a line, an
address given back goes to whichever launch looks first, and a new launch looks at once: in an instance
refresh (each replacement launches while an old instance drains, whose address comes back when its drain
ends) the new launches took every address given back, and the oldest waiter was abandoned at its
``EipWaitSeconds`` while addresses had come back all along. So a launch that finds the pool empty joins the
pool's line, and a launch may claim a free address only when fewer waiters are ahead of it than there are
free addresses: the oldest waiters take the addresses given back, a new launch waits its turn. What the quota
frees (allocate mode, or a pool that may grow) has no count to read: only a launch with no waiter ahead of it
allocates, the first in line, which looks every 15 s (each waiter is the first in line at the latest when the
wait of all those ahead, which began before its own, is over, so none is abandoned while it could allocate).

The line is one item beside the lifecycle records (one read per look, a conditional write to join: the cost
of a look does not grow with the records or the waiters' number of looks). A waiter leaves it when it
holds its address or gives up, and one that could not (a crash, a launch ended elsewhere) no longer counts once
its instance holds an address of the pool, once its instance is gone, once its lifecycle is over, or at the
end of its wait, whichever comes first; the next write drops it once its wait is over. Whether a waiter's
lifecycle is over is looked up (its record) by the launch it would keep from an address, for the first waiters
ahead of it, and the launch that finds it over takes it out of the line: the waiters behind a run of lifecycles
over get past it a few looks at a time, rather than wait for the end of the wait of each.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from nodecycle.domain.errors import TransientError

log = logging.getLogger(__name__)

WRITES = 8  # conditional writes of the line tried in a row (each after a fresh read) before a retry later
# The longest line, in waiters and in bytes: its item must stay under DynamoDB's 400 KB, which it refuses for
# good (every launch joining the line would fail its message). A waiter takes about 180 bytes there, and up to
# about 410 for a launch the sweeper adopted (its lifecycle id holds the hook's name, of up to 255 characters):
# a thousand of those came within 0.4 % of the limit. So a line is also bounded by an estimate of its size (its
# waiters' ids, and WAITER_BYTES each for their times, names and structure), a fifth under the limit. A launch
# that finds the line full waits without joining it (first come, first served no longer holds for it: a fleet of
# hundreds of launches waiting for one pool is a pool far too small).
MAX_WAITERS = 1000
MAX_LINE_BYTES = 320_000
WAITER_BYTES = 120
# A pool address EC2 refused to associate (UnauthorizedOperation: a denial by a condition on its tags) is told to
# every launch of its line for this long (see PoolRefusals), at most MAX_POOL_REFUSALS of them, the latest kept
REFUSED_FOR = timedelta(minutes=10)
MAX_POOL_REFUSALS = 64
MAX_REFUSERS = 4  # launches kept per address refused (two tell it refused, whatever else they were refused)
# A launch refused more pool addresses than a look tries (see assign's REFUSED_PER_LOOK) within REFUSED_FOR is as
# likely refused for its own sake (every address it tries is refused): its refusals are not believed alone
BELIEVED_ALONE = 2


@dataclass(frozen=True, order=True)
class Waiter:
    """A launch waiting for an address of the pool: in line from ``since`` (when it first found the pool
    empty) until ``until`` (when it gives up). Ordered by ``since``, ties by the lifecycle's id."""

    since: datetime
    lifecycle: str  # the id of its lifecycle record
    instance_id: str
    until: datetime


@dataclass(frozen=True)
class Line:
    """The line as stored: its waiters, oldest first, and its version (0: never written)."""

    waiters: tuple[Waiter, ...] = ()
    version: int = 0


@dataclass(frozen=True)
class Held:
    """The pool address a launch left its instance holding, as the launch saw it associated (``at``): what the
    instance's release takes back even while EC2's reads do not show that association yet (they lag its writes,
    for minutes under load), its DisassociateAddress answered as unknown meanwhile."""

    allocation_id: str
    association_id: str
    public_ip: str
    pool: str
    at: datetime


class AddressLines(Protocol):
    """Where the lines are kept: one per owner and pool, written only over the version read."""

    def read(self, key: str) -> Line:
        """The line as last written (read consistently); an empty line of version 0 when there is none."""
        ...

    def write(self, key: str, waiters: Sequence[Waiter], expected_version: int) -> bool:
        """Replace the line by ``waiters`` if it is still at ``expected_version``; False when another writer
        came first. Raises :class:`~nodecycle.domain.errors.TransientError`."""
        ...

    def taking(self, run: str, allocation_id: str, instead_of: str | None) -> str:
        """The address the deliveries of one message (``run``: a launch at one ``seq``) take: ``allocation_id``
        when none is written for ``run`` yet, or the one written is ``instead_of`` (one EC2 refused this
        delivery); otherwise the one written, by another delivery of the same message. One conditional write,
        kept for a day. Raises :class:`~nodecycle.domain.errors.TransientError`."""
        ...

    def hold(self, owner: str, instance_id: str, held: Held) -> None:
        """Keep (for a day, over any earlier) the pool address the instance's launch left it holding. Raises
        :class:`~nodecycle.domain.errors.TransientError`."""
        ...

    def held(self, owner: str, instance_id: str) -> Held | None:
        """The pool address last kept for the instance (read consistently); None when none (or a day old or more).
        Raises :class:`~nodecycle.domain.errors.TransientError`."""
        ...


@dataclass(frozen=True)
class Refused:
    """The pool addresses EC2 refused to the launches of a line: when each was last refused to each instance, and
    the version read (0: none written yet)."""

    by: Mapping[tuple[str, str], datetime]  # (allocation id, instance id) -> when
    version: int = 0


class Refusals(Protocol):
    """Where the pool addresses EC2 refused are told to the launches of a line: one item per line."""

    def refusals(self, key: str) -> Refused:
        """The refusals kept (read consistently); none when none. Raises
        :class:`~nodecycle.domain.errors.TransientError`."""
        ...

    def keep_refusals(
        self, key: str, refused: Mapping[tuple[str, str], datetime], expected_version: int
    ) -> bool:
        """Keep ``refused`` over what was kept, only if it is still ``expected_version``: False when another
        wrote first. Raises :class:`~nodecycle.domain.errors.TransientError`."""
        ...


class PoolRefusals:
    """The addresses of a pool EC2 refused to a launch of its line lately: not counted free by the launches
    (a waiter kept behind one no launch can take waits for nothing, and a launch that counts one may take,
    past the waiters ahead of it, the one address they could), nor by a release waking them.

    A refusal may be the instance's, not the address's (a policy on the instance's tags, a subnet without an
    internet gateway, a denial while IAM propagates), which told to the line would keep its launches from good
    addresses: the address is still tried, after the others, by a launch with no one ahead; it is told no more
    REFUSED_FOR after its last refusal; a launch refused more addresses than BELIEVED_ALONE is not believed alone
    (the address is told once another launch is refused it too); a launch whose policy decides on its refusals
    takes them back (``withdraw``); an address associated after its refusal is told refused no more (``taken``).
    Each write is made over the version read (again over a fresh read when another came first): two launches
    refused at once keep both refusals. Advice only: nothing here raises."""

    def __init__(self, refusals: Refusals, key: str) -> None:
        self._refusals = refusals
        self._key = key

    def read(self, now: datetime) -> frozenset[str]:
        """The addresses told refused now; empty when that is not told now."""
        return self.read_both(now)[0]

    def read_both(self, now: datetime) -> tuple[frozenset[str], frozenset[str]]:
        """The addresses told refused now, and those of them refused to two launches or more (the addresses' own
        refusal, as sure as the line can tell it); both empty when that is not told now."""
        try:
            refused = self._refusals.refusals(self._key)
        except TransientError as error:
            log.info("could not read the addresses refused in %s: %s", self._key, error)
            return frozenset(), frozenset()
        recent = _recent(refused.by, now)
        refusers = Counter(allocation_id for allocation_id, _ in recent)
        return _told(recent), frozenset(a for a, count in refusers.items() if count > 1)

    def add(self, allocation_ids: Collection[str], instance_id: str, now: datetime) -> None:
        """Tell the line that EC2 refused these addresses to ``instance_id`` ``now``."""
        self._change(lambda by: {**by, **{(a, instance_id): now for a in allocation_ids}}, now, "tell")

    def withdraw(self, instance_id: str, now: datetime) -> None:
        """Take back what was told of ``instance_id``'s refusals: they were its own (every address refused)."""
        self._change(
            lambda by: {pair: at for pair, at in by.items() if pair[1] != instance_id}, now, "withdraw"
        )

    def taken(self, allocation_id: str, now: datetime) -> None:
        """The address was associated: its refusals were not its own, or are over (a condition since changed)."""
        self._change(
            lambda by: {pair: at for pair, at in by.items() if pair[0] != allocation_id}, now, "clear"
        )

    def _change(
        self,
        change: Callable[[dict[tuple[str, str], datetime]], dict[tuple[str, str], datetime]],
        now: datetime,
        doing: str,
    ) -> None:
        try:
            for _ in range(WRITES):
                refused = self._refusals.refusals(self._key)
                kept = _bounded(_recent(change(_recent(refused.by, now)), now))
                if kept == _recent(refused.by, now) and len(kept) == len(refused.by):
                    return  # (nothing to write: a write lost to a race is found made at the next read)
                if self._refusals.keep_refusals(self._key, kept, refused.version):
                    return
            log.warning("could not %s the refusals of %s: %d writes came second", doing, self._key, WRITES)
        except TransientError as error:
            log.warning("could not %s the refusals of %s: %s", doing, self._key, error)


def _recent(by: Mapping[tuple[str, str], datetime], now: datetime) -> dict[tuple[str, str], datetime]:
    return {pair: at for pair, at in by.items() if now - at < REFUSED_FOR}


def _told(by: Mapping[tuple[str, str], datetime]) -> frozenset[str]:
    """The addresses refused to two launches or more, or to one launch refused at most BELIEVED_ALONE addresses."""
    per_instance = Counter(instance for _, instance in by)
    refusers: dict[str, set[str]] = {}
    for allocation_id, instance in by:
        refusers.setdefault(allocation_id, set()).add(instance)
    return frozenset(
        allocation_id
        for allocation_id, instances in refusers.items()
        if len(instances) > 1 or any(per_instance[instance] <= BELIEVED_ALONE for instance in instances)
    )


def _bounded(by: Mapping[tuple[str, str], datetime]) -> dict[tuple[str, str], datetime]:
    """The latest MAX_POOL_REFUSALS addresses refused, each with its latest MAX_REFUSERS launches."""
    latest: dict[str, list[tuple[datetime, str]]] = {}
    for (allocation_id, instance), at in by.items():
        latest.setdefault(allocation_id, []).append((at, instance))
    addresses = sorted(latest, key=lambda allocation_id: max(latest[allocation_id]), reverse=True)
    return {
        (allocation_id, instance): at
        for allocation_id in addresses[:MAX_POOL_REFUSALS]
        for at, instance in sorted(latest[allocation_id], reverse=True)[:MAX_REFUSERS]
    }


def line_key(owner: str, pool: str | None) -> str:
    """The line of a pool, or (None) of the launches of allocate mode waiting for the account's quota."""
    return f"{owner}/{pool}" if pool is not None else f"{owner}/"


def ahead_of(
    line: Line, lifecycle: str, instance_id: str, since: datetime, now: datetime, served: Collection[str]
) -> list[Waiter]:
    """The waiters of the line that still count and came before the lifecycle (in line, or about to join it
    ``since``): not this lifecycle, nor an earlier one of its instance (a launch out of a warm pool again, after
    one whose action lapsed in line), not past their wait, not on an instance of ``served`` (one that holds an
    address of the pool: it got its own)."""
    me = (since, lifecycle)
    return [
        waiter
        for waiter in line.waiters
        if waiter.lifecycle != lifecycle
        and waiter.instance_id != instance_id
        and waiter.until > now
        and waiter.instance_id not in served
        and (waiter.since, waiter.lifecycle) < me
    ]


def line_bytes(waiters: Sequence[Waiter]) -> int:
    """An estimate, on the high side, of the bytes a line of ``waiters`` takes where it is stored."""
    return sum(len(w.lifecycle.encode()) + len(w.instance_id.encode()) + WAITER_BYTES for w in waiters)


class PoolLine:
    """One pool's line, as ASSIGN_EIP joins and leaves it."""

    def __init__(self, lines: AddressLines, key: str) -> None:
        self._lines = lines
        self._key = key

    def read(self) -> Line:
        return self._lines.read(self._key)

    def join(self, waiter: Waiter, now: datetime, line: Line | None = None) -> bool:
        """Put the waiter in line at its place (by ``since``: a join repeated after a crash or a restart of
        the assignment keeps the place of the first). The waiters past their wait leave with this write. True
        when this call put it in line (False: in it already, or the line full)."""
        for _ in range(WRITES):
            current = line if line is not None else self._lines.read(self._key)
            line = None
            if any(other.lifecycle == waiter.lifecycle for other in current.waiters):
                return False
            # (an earlier lifecycle of its instance waits no more: this one takes its place)
            kept = [o for o in current.waiters if o.until > now and o.instance_id != waiter.instance_id]
            if len(kept) >= MAX_WAITERS or line_bytes([*kept, waiter]) > MAX_LINE_BYTES:
                log.warning(
                    "the line of %s is full (%d waiting): %s waits out of it",
                    self._key,
                    len(kept),
                    waiter.instance_id,
                )
                return False
            if self._lines.write(self._key, sorted([*kept, waiter]), current.version):
                return True
        raise TransientError(f"the line of {self._key} changed at each of {WRITES} writes to join it")

    def drop(self, lifecycles: Collection[str], line: Line, now: datetime) -> Line | None:
        """Take the waiters of ``lifecycles`` (over: their launch will not leave the line itself) out of the
        line as read, with the waiters past their wait: one write over the version read, the line written; None
        when another writer came first (the next look that finds them over takes them out)."""
        kept = tuple(w for w in line.waiters if w.lifecycle not in lifecycles and w.until > now)
        if not self._lines.write(self._key, kept, line.version):
            return None
        return Line(kept, line.version + 1)

    def leave(self, lifecycle: str, now: datetime) -> None:
        """Take the lifecycle out of the line (if in it), with the waiters past their wait."""
        for _ in range(WRITES):
            current = self._lines.read(self._key)
            if not any(other.lifecycle == lifecycle for other in current.waiters):
                return
            kept = [w for w in current.waiters if w.lifecycle != lifecycle and w.until > now]
            if self._lines.write(self._key, kept, current.version):
                return
        raise TransientError(f"the line of {self._key} changed at each of {WRITES} writes to leave it")
