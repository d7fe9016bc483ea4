"""An address given back wakes the first launches waiting for one, as a freed budget slot wakes its waiter.

A launch in a pool's line (in allocate mode, the quota's) looks for a free address at its own pace: every 15 s
first in line, less often further back (``AssignAddress._exhausted``). An address that RELEASE_EIP returns to its
pool, or releases under the quota, would idle until that look, the instance it is for held in ``Pending:Wait``
meanwhile: in an instance refresh of a pool sized to the fleet, each replacement paid up to 15 s. So the step
that frees it sends the first waiters of that line (one per address freed; for one released, the quota's line and
the line of a pool that may grow, whose launches wait for the quota too) their ASSIGN_EIP message now,
marked as a wake-up: the engine runs it before its due time. A launch that leaves the line without an address
(its wait over, its instance gone) wakes the next waiter so too: that one may be first now, and an address free
for it (the one the launch leaving was woken for).

The wake-up only brings a look forward; the look decides, in the order of the line, as at its own pace (a
launch that came later still yields to those ahead of it, woken or not). A wake-up lost (SQS refused it, the
invocation died) costs the waiter time, not its address: its own delayed look remains. One that arrives after
the waiter's own look moved its record on, the record still waiting in line (:func:`waits_in_line`), is run at
the record's current ``seq`` (the engine, as for an overtaken budget wake-up): that look may have listed the
pool before the address came back and committed "wait again" after this record was read, and the address would
idle until its next look. One that arrives once the waiter holds an address, or is verifying one, or has moved
on, runs nothing (a watch). A duplicate while it still waits costs a look, which takes nothing out of turn. Two
that run at once are two deliveries of one look, which ASSIGN_EIP is built for (both reach for the same
address; one associates it, the other finds it on the instance).

EC2's reads lag its writes (for seconds under load): the woken look, listing the pool, may still see the address
on the instance that gave it back, find nothing free and wait its 15 s, the address idle meanwhile. So whatever
gives a pool address back (a release, a warm-pool release of the claim no listing shows yet, the sweep taking it
from a gone instance: :func:`offers_of`) offers it to the waiter woken for it (:class:`Offer`, one item per
waiter beside the line, written before the wake-up is sent), and that waiter's look, finding nothing free in its
listing, tries AssociateAddress on the offered address directly (``AssignAddress._take_offered``): EC2's writes decide on its own
state, in which the address is free, and AllowReassociation false moves nothing, so an address taken since (a new
launch, another waiter, two woken for one address) is refused and the look goes on as before. A read by its id
that still shows the association its giver ended is a read behind, not the address taken (association ids are
never reused). An offer is tried once (per association ended) and only within ``OFFERED_FOR``.

Cost: one read of the line per release that freed an address, one read of a record and one message per waiter
woken (a waiter whose lifecycle is over, a few at most, costs its read), and one listing of the pool when more
launches wait than were to be woken (as many are woken as the pool has free addresses: see ``given_back``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.eip.line import AddressLines, PoolRefusals, Refusals, line_key
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import Address, Addresses
from nodecycle.domain.ports.lifecycle import RecordStore, WorkMessage, WorkQueues

log = logging.getLogger(__name__)

# Records looked up, per line, to find the first waiters still waiting: those whose lifecycle is over (a
# crash, a launch ended elsewhere) stay in the line until a launch behind them takes them out
WAKE_LOOKS = 5
# An address offered to a woken waiter is tried by a look within this of its release: later, the look's own
# listing shows what is free (EC2's lag is seconds), and the address may long be someone else's
OFFERED_FOR = timedelta(seconds=60)


@dataclass(frozen=True)
class Offer:
    """A pool address a release gave back (``at``), offered to the waiter woken for it: the association the
    release ended (``ended``) is what a read behind the release still shows."""

    pool: str
    allocation_id: str
    public_ip: str
    ended: str
    at: datetime


def offers_of(returned: Iterable[Address], at: datetime) -> list[Offer]:
    """The offers of the pool addresses given back ``at`` (each as listed, with the association its giver ended),
    in order: what a release, a warm-pool release of its launch's claim and the sweep each give
    :meth:`LineWaker.given_back`, whose waiter's look tries them directly."""
    return [
        Offer(
            pool=address.pool,
            allocation_id=address.allocation_id,
            public_ip=address.public_ip,
            ended=address.association_id,
            at=at,
        )
        for address in returned
        if address.pool is not None and address.association_id is not None
    ]


class Offers(Protocol):
    """Where the offers to woken waiters are kept: one per line and waiter, the latest kept."""

    def offer(self, key: str, lifecycle: str, offer: Offer) -> None:
        """Keep the offer for the waiter (over any earlier). Raises
        :class:`~nodecycle.domain.errors.TransientError`."""
        ...

    def offered(self, key: str, lifecycle: str) -> Offer | None:
        """The latest offer to the waiter (read consistently); None when none (or a day old or more). Raises
        :class:`~nodecycle.domain.errors.TransientError`."""
        ...


class LineWaker:
    """Wakes the first launches of a line when addresses are given back to it."""

    def __init__(
        self,
        *,
        owner: str,
        lines: AddressLines,
        records: RecordStore,
        queues: WorkQueues,
        quota_pool: str | None = None,
        addresses: Addresses | None = None,
        offers: Offers | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        self._owner = owner
        # The pool addresses EC2 refused lately to a launch of a line: not counted free (None: every one counts)
        self._refusals = refusals
        # Where the addresses given back are offered to the waiters woken for them (None: not offered)
        self._offers = offers
        # To count the free addresses of a pool (None: each wake-up wakes as many waiters as it is told)
        self._addresses = addresses
        self._lines = lines
        self._records = records
        self._queues = queues
        # The pool whose launches wait for the quota in its own line (pool mode, the pool allowed to grow): an
        # address released is room for the first of them too; allocate mode's line is empty then
        self._quota_pool = quota_pool

    def given_back(
        self,
        freed: Mapping[str | None, int],
        now: datetime,
        *,
        passing_over: str | None = None,
        offered: Sequence[Offer] = (),
    ) -> None:
        """``freed``: how many addresses were given back to each pool (None: released, room under the quota), or
        how many launches the first waiters no longer wait behind. A pool's line wakes as many of its first
        waiters as that, or as the pool has free addresses now if more (one DescribeAddresses, only when more
        waiters wait than were to be woken): the first F waiters may each take one of F free addresses, and no
        more are woken (their looks would find nothing to take). ``passing_over``: the lifecycle of the launch
        that calls, leaving the line (its record still waits in it until its run commits, and a write that took
        it out of the line may have failed): not woken. Never raises: a wake-up only brings a look forward, and
        the step that gives an address back (a terminate's release) must not fail, nor be retried, for one it
        could not send, however it failed (throttled, denied, a 5xx, a timeout, an answer lost, SQS refusing it
        for its queue's key, a bug): the waiters' own looks remain. Each one lost is told (a warning, with the
        traceback of a failure that is not AWS's). ``offered``: the pool addresses given back, each offered to one
        waiter woken for its pool, in the line's order (the first woken the first given back)."""
        lines = dict(freed)
        if freed.get(None) and self._quota_pool is not None:
            lines[self._quota_pool] = lines.get(self._quota_pool, 0) + freed[None]
        for pool, count in lines.items():
            key = line_key(self._owner, pool)
            try:
                line = self._lines.read(key)
            except Exception as error:  # (see the docstring: any failure)
                self._lost(f"could not read the line of {key} to wake its first waiter", error)
                continue
            waiting = [w for w in line.waiters if w.until > now and w.lifecycle != passing_over]
            if pool is not None and len(waiting) > count:
                count = max(count, self._free(pool, now))
            woken = 0
            offers = [offer for offer in offered if offer.pool == pool]
            for looked, waiter in enumerate(waiting):
                if woken >= count or looked - woken >= WAKE_LOOKS:
                    break
                offer = offers[woken] if woken < len(offers) else None
                try:
                    if self._wake(waiter.lifecycle, waiter.instance_id, key, offer):
                        woken += 1
                except Exception as error:  # (see the docstring: any failure)
                    # (counted as woken: the next waiter must not take what this one is first in line for)
                    woken += 1
                    self._lost(f"could not wake {waiter.instance_id} for an address given back", error)

    def _free(self, pool: str, now: datetime) -> int:
        """How many addresses of the pool are free now, as EC2 lists them: the first that many waiters may each
        take one. More than were given back when one was free already (another given back moments ago, its
        waiter's look not run yet; one the launch leaving the line was woken for), fewer while EC2 does not show a
        disassociation yet (the count given back stands then). 0 when EC2 does not tell now. An address EC2 refused
        lately to a launch of the line does not count: a waiter woken for it would find nothing it may take."""
        if self._addresses is None:
            return 0
        try:
            found = self._addresses.find(self._owner, pool=pool)
        except Exception as error:  # (see given_back: any failure; not AWS's, a bug: with its traceback)
            transient = isinstance(error, TransientError)
            log.log(
                logging.INFO if transient else logging.WARNING,
                "could not count the free addresses of pool %r to wake its waiters (those given back are): %s",
                pool,
                error,
                exc_info=not transient,
            )
            return 0
        refused = (
            PoolRefusals(self._refusals, line_key(self._owner, pool)).read(now)
            if self._refusals is not None
            else frozenset()
        )
        return sum(1 for address in found if not address.associated and address.allocation_id not in refused)

    def _lost(self, what: str, error: Exception) -> None:
        # (a failure that is not AWS's, a bug, is told with its traceback)
        transient = isinstance(error, TransientError)
        log.warning("%s (it looks at its own pace): %s", what, error, exc_info=not transient)

    def _wake(self, lifecycle: str, instance_id: str, key: str, offer: Offer | None) -> bool:
        """Send the waiter its look now, the address ``offer`` offered to it first; False when its lifecycle waits
        for an address no more."""
        record = self._records.get(lifecycle)
        if record is None or record.instance_id != instance_id or not waits_in_line(record):
            return False
        if (record.extra.get(SCRATCH) or {}).get("allocated"):
            # Room came back to it already: it allocated an address of its own and is associating it (EC2 may not
            # know it yet, or its instance not take it yet). No address given back is for it, and woken, it tried
            # its own again early, a try of the minute EC2 is given to know it spent (see assign.verify_delay),
            # counted woken while the launch behind it, which the address was for, was not
            return False
        if offer is not None and self._offers is not None:
            try:
                self._offers.offer(key, lifecycle, offer)
            except Exception as error:  # (see given_back: any failure; woken all the same, its look lists)
                self._lost(f"could not offer address {offer.public_ip} to {instance_id}", error)
        self._queues.send(
            Worker.EIP,
            WorkMessage(record_id=record.id, seq=record.seq, step=record.step, wake=True, token=record.token),
        )
        log.info("woke %s, waiting in line, for an address given back", instance_id)
        return True


def waits_in_line(record: LifecycleRecord) -> bool:
    """At ASSIGN_EIP, waiting for an address to be given back (and not verifying an association it made)."""
    scratch = record.extra.get(SCRATCH) or {}
    return (
        not record.finished
        and record.step is Step.ASSIGN_EIP
        and bool(scratch.get("exhausted_since"))
        and "verify" not in scratch
    )
