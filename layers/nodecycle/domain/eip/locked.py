"""Addresses AWS has locked: told once, tried again at a growing interval, released once unlocked.

EC2 refuses ReleaseAddress of a locked address (``InvalidAddress.Locked``; ``InvalidAddress.PtrSet``, a reverse DNS
record on it) until AWS Support unlocks it, days later perhaps. Tried at every sweep, such an address failed each
one (``EipFailures`` counted, the sweep failed to its dead-letter queue): an alarm without end for one address no
wait changes. So a lock met is remembered (one item per owner beside the lifecycle records, ``eip-locked#<owner>``:
the address's own tags would need CreateTags, which the functions may use only at an allocation), told once
(``EipFailures`` and an error naming the address, by whoever meets it first: the instance's release or the sweep;
the item is written over the version read, so two at once tell it once), and the release is tried again only at
its next try, LOCK_RETRY_FIRST after the first refusal, twice as long after each, up to LOCK_RETRY_MAX: an address
unlocked is released at most that long (and a sweep) after, nothing leaks, and a lock that lasts costs a few calls
a day. A sweep reads the item once (at its first address to release or to disassociate: none read in a sweep that frees
nothing).

The sweep remembers the same way an address EC2 refuses to free for good though no lock is on it (``refused``): a
denial of ReleaseAddress or DisassociateAddress (the role narrowed, a service control policy's explicit deny; EC2
answers both UnauthorizedOperation), or DisassociateAddress's documented refusal for the only public IPv4 address
of a network interface with a public DNS name. Tried at every sweep, it too failed each one, told every 5 minutes
for ever. Unlike a lock, which only AWS Support lifts, such a refusal is the account's to lift: it is told (an
error naming the address and EC2's answer, which names the call and the code, and ``EipFailures``) when first met
and again at each refused try, at the same growing interval: periodically, at most LOCK_RETRY_MAX apart.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from nodecycle.domain.eip import release_unassociated
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.addresses import Address, Addresses, AddressLocked, AddressRefused
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

LOCK_RETRY_FIRST = timedelta(minutes=15)
LOCK_RETRY_MAX = timedelta(hours=6)
# A lock not tried again for this long past its next try is forgotten at the next write: its address was released
# (an allocation id never comes back), or no sweep ran for a day (then it is met, and told, again)
FORGOTTEN_AFTER = timedelta(days=1)
WRITES = 8  # conditional writes tried in a row (each over a fresh read)


@dataclass(frozen=True)
class Lock:
    """A lock as remembered: first met ``since``, ``tries`` releases refused, the next one tried at ``next_try``."""

    since: datetime
    tries: int
    next_try: datetime
    refused: bool = (
        False  # a refusal the account may lift (a denial), not AWS's lock: told at each refused try
    )
    # (a refusal) the association EC2 refused to end; None: the release refused. A refusal is of one call on the
    # address as it was: once EC2 ended that association (at the termination) or the address was claimed again,
    # the memory holds back neither the release nor the new association's end (see ``LockedReleases.waits``)
    association: str | None = None

    def holds(self, association: str | None) -> bool:
        """Whether this memory is of the call about to be made: ending ``association`` (None: the release)."""
        return not self.refused or self.association == association


@dataclass(frozen=True)
class Locks:
    """The locks remembered for an owner's addresses (by allocation id), and the version read (0: none written)."""

    by: Mapping[str, Lock] = field(default_factory=dict)
    version: int = 0


class LockedAddresses(Protocol):
    """Where the locks met are remembered: one item per owner, written only over the version read."""

    def locks(self, owner: str) -> Locks:
        """The locks remembered (read consistently); none when none. Raises
        :class:`~nodecycle.domain.errors.TransientError`."""
        ...

    def keep_locks(self, owner: str, locks: Mapping[str, Lock], expected_version: int) -> bool:
        """Remember ``locks`` in place of what was, only if it is still ``expected_version``: False when another
        wrote first. Raises :class:`~nodecycle.domain.errors.TransientError`."""
        ...


def retry_after(tries: int) -> timedelta:
    """How long after its ``tries``-th refusal a locked address is tried again."""
    return min(LOCK_RETRY_FIRST * 2 ** min(tries - 1, 16), LOCK_RETRY_MAX)


class LockedReleases:
    """The releases of unassociated addresses (``release_unassociated``) that remember the addresses AWS locked."""

    def __init__(self, *, owner: str, locks: LockedAddresses, metrics: Metrics) -> None:
        self._owner = owner
        self._locks = locks
        self._metrics = metrics
        # the locks as read for the sweep of one moment (a sweep judges its addresses at one ``now``)
        self._read: tuple[datetime, Locks] | None = None

    def waits(self, address: Address, now: datetime, association: str | None = None) -> bool:
        """Whether the address is remembered locked, or refused the call about to be made (ending
        ``association``; None: the release), and its next try is not due yet (logged): the caller leaves it as
        it is. A refusal of another call (another association's end, EC2 disassociated the address since, a
        launch claimed it again) holds nothing back. The locks are read once for all the calls of one ``now``."""
        if self._read is None or self._read[0] != now:
            try:
                self._read = (now, self._locks.locks(self._owner))
            except TransientError as error:
                # (the table throttled: the release is tried as if nothing were remembered, rather than keep a leak
                # from being released; a lock met then is remembered, or its write fails the caller as EC2's would)
                log.warning("could not read the addresses AWS locked: %s; releasing as if none were", error)
                self._read = (now, Locks())
        lock = self._read[1].by.get(address.allocation_id)
        if lock is None or now >= lock.next_try or not lock.holds(association):
            return False
        log.info(
            "address %s is %s (since %s, %d tries refused): tried again at %s",
            address.public_ip,
            "refused by EC2" if lock.refused else "locked by AWS",
            lock.since.isoformat(timespec="seconds"),
            lock.tries,
            lock.next_try.isoformat(timespec="seconds"),
        )
        return True

    def release(self, addresses: Addresses, address: Address, now: datetime) -> bool:
        """As ``release_unassociated``; but an address remembered locked is tried only once its next try is due,
        and a lock met is remembered: False for both (kept; no failure of the caller's). The locks are read once
        for all the calls of one ``now``."""
        if self.waits(address, now):
            return False
        lock = self._read[1].by.get(address.allocation_id) if self._read is not None else None
        if lock is not None and not lock.holds(None):
            lock = None  # (another association's end refused: not this release's)
        try:
            released = release_unassociated(addresses, address.allocation_id)
        except AddressLocked as error:
            self.met(address, now, error)
            return False
        if released and lock is not None:
            log.warning(
                "address %s, %s since %s, is %s: released",
                address.public_ip,
                "refused by EC2" if lock.refused else "locked by AWS",
                lock.since.isoformat(timespec="seconds"),
                "allowed" if lock.refused else "unlocked",
            )
        return released

    def met(
        self, address: Address, now: datetime, error: AddressRefused, association: str | None = None
    ) -> None:
        """EC2 refused to free the address (``AddressLocked``: AWS locked it; any other: refused for good, see the
        module): remember it, and tell it if no one has yet (a lock), or if no one has at this try (a refusal).
        A meeting before the try remembered is due (two sweeps at once, a schedule delivered twice) changes
        nothing: the other told it and set its next try. ``association``: the association EC2 refused to end (None:
        the release); a refusal remembered of another call is a new one, told as such."""
        refused = not isinstance(error, AddressLocked)
        for _ in range(WRITES):
            read = self._locks.locks(self._owner)
            earlier = read.by.get(address.allocation_id)
            if earlier is not None and refused and not earlier.holds(association):
                earlier = None
            if earlier is not None and now < earlier.next_try:
                self._read = (now, read)
                return
            tries = 1 if earlier is None else earlier.tries + 1
            lock = Lock(
                since=now if earlier is None else earlier.since,
                tries=tries,
                next_try=now + retry_after(tries),
                refused=refused,
                association=association if refused else None,
            )
            kept = {
                allocation_id: other
                for allocation_id, other in read.by.items()
                if now < other.next_try + FORGOTTEN_AFTER
            }
            kept[address.allocation_id] = lock
            if self._locks.keep_locks(self._owner, kept, read.version):
                self._read = (now, Locks(by=kept, version=read.version + 1))
                break
        else:
            raise TransientError(f"the locks of {self._owner} changed at each of {WRITES} writes")
        if refused:
            self._metrics.count("EipFailures")
            log.error(
                "EC2 refuses to free address %s (%d tries refused since %s): %s; it stays as it is until the refusal "
                "is lifted (the role's policy, a service control policy) or it is freed by hand: tried again at %s, "
                "then at a growing interval up to %s, and told at each refused try",
                address.public_ip,
                tries,
                lock.since.isoformat(timespec="seconds"),
                error,
                lock.next_try.isoformat(timespec="seconds"),
                LOCK_RETRY_MAX,
            )
            return
        if earlier is not None:
            log.warning(
                "address %s is still locked by AWS (since %s, %d releases refused): tried again at %s",
                address.public_ip,
                lock.since.isoformat(timespec="seconds"),
                tries,
                lock.next_try.isoformat(timespec="seconds"),
            )
            return
        self._metrics.count("EipFailures")
        log.error(
            "address %s is locked by AWS: %s; it cannot be released until AWS Support unlocks it (or its reverse "
            "DNS record is removed): tried again at %s, then at a growing interval up to %s",
            address.public_ip,
            error,
            lock.next_try.isoformat(timespec="seconds"),
            LOCK_RETRY_MAX,
        )
