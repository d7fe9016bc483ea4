"""ASSIGN_EIP: give a launching instance its Elastic IP, and see that it holds, before it goes in service.

A run of the step does what it can without waiting and returns. What must wait (an association that
DescribeAddresses does not show yet, an instance still pending) is written to ``record.extra["eip"]`` and
picked up by the next run of the step, ``Outcome.wait`` seconds later: nothing sleeps in the Lambda.

Idempotency: AllocateAddress has no client token, so every address is tagged at its allocation with the
instance it is for, and every run starts by looking for addresses so tagged. A redelivery after the
association keeps what it finds; a redelivery after a crash between AllocateAddress and AssociateAddress
associates the address it finds instead of allocating a second one (unless it was allocated longer ago than
``TAKE_OWN_WITHIN``: the sweeper's to release by then, which a launch never reaches for). Two deliveries running at the same
moment may both allocate; both then take the lowest allocation id tagged for the instance, one associates
it, the other is refused (``Resource.AlreadyAssociated``), sees it on this very instance and keeps it, and
the spare is released.

EC2 is eventually consistent: an address just allocated may be unknown for a few seconds to AssociateAddress
and DescribeAddresses (``InvalidAllocationID.NotFound``), and missing from their listings. The launch remembers
the address it allocated (``record.extra["eip"]["allocated"]``) until it holds one: EC2 answering that it does
not exist is then EC2 not knowing it yet, asked again further apart each time (``verify_delay``: EC2's reads lag
by seconds under load), for as long as EC2 has never shown it, however long that is (then the failure policy
decides); never another one allocated meanwhile (in pool mode, the pool grown again), which would leave the launch
two addresses once the first shows. Only once EC2 has shown it (listed it, taken or refused it) does it answering
so for a minute mean an address released behind our back, a failure counted and another one allocated, and only
when two reads by its id do not find it either (EC2's reads are not monotonic: a replica behind answers NotFound for
an address another has shown). So too an association that does not show yet. One older than ``TAKE_OWN_WITHIN`` and never associated the launch releases
itself before it allocates another.

No stealing: AssociateAddress always runs with AllowReassociation false, so an address that another launch
associated first is refused, not moved, and the step tries the next free one. Nor is an address moved off
the instance: EC2 associates the address with the instance's primary private IP and silently disassociates
the one already there, so an instance that holds an address not nodecycle's on that IP gets none (the failure
policy decides), rather than lose it to be released as unassociated by whoever owns it. An address on
another interface or private IP (an interface the instance's bootstrap attaches) is not in the way.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, Protocol

from nodecycle.domain.eip import SCRATCH, release_unassociated, without_scratch
from nodecycle.domain.eip.line import (
    AddressLines,
    Held,
    Line,
    PoolLine,
    PoolRefusals,
    Refusals,
    Waiter,
    ahead_of,
    line_key,
)
from nodecycle.domain.eip.wake import OFFERED_FOR, LineWaker, Offers
from nodecycle.domain.engine import Outcome, left_its_group
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.flow import after_completion
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.policy import ActionResult, EipFailurePolicy, EipMode, EipPolicy
from nodecycle.domain.ports.addresses import (
    ALLOCATED_AT_TAG,
    ALLOCATED_INTO_TAG,
    GROUP_TAG,
    INSTANCE_TAG,
    OWNER_TAG,
    POOL_TAG,
    Address,
    AddressAlreadyAssociated,
    Addresses,
    AddressInUse,
    AddressLimitExceeded,
    AddressNotFound,
    AddressRefused,
    InstanceRefused,
    InstanceUnavailable,
    distinct,
)
from nodecycle.domain.ports.instances import GONE_STATES
from nodecycle.domain.ports.lifecycle import RecordStore
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

VERIFY_DELAY = 2  # seconds: DescribeAddresses usually shows a new association within a second or two
# ...and seconds under load: the reads after the first are spaced twice as far apart each time, up to this
VERIFY_DELAY_MAX = 30  # seconds
# Reads of an association that does not show before it is made again: a minute in all (2, 4, 8, 16, 30 s apart)
VERIFY_READS = 6
# Tries, spaced as those reads, to associate an address this launch allocated that EC2 has shown once and does not
# know now, before it is taken for one released behind our back (and the assignment starts over): a minute. Only
# the sweeper releases an address of ours that no instance holds, and not before the sweep grace (five minutes at
# least). One EC2 has never shown is EC2 not knowing it yet, however long: tried on (see AssignAddress._unseen)
UNSEEN_TRIES = 6
# An unassociated address allocated for the instance longer ago than this (a launch that crashed after its
# allocation, delivered again late) is left to the sweeper, and another one allocated: the sweeper releases such an
# address once it is older than its grace (five minutes at least), and a launch and a sweep must never reach for the
# same one. EC2 has no conditional release, and its reads lag its writes by seconds: a sweep that lists the address,
# and looks at it again, before the launch's association shows would release it from the instance, without a word
# in a default VPC (in another, EC2 refuses: InvalidIPAddress.InUse). A minute short of the least grace leaves room
# for the seconds between a look and a call, the whole seconds of the tag and the clocks of two functions
TAKE_OWN_WITHIN = timedelta(minutes=4)
INSTANCE_DELAY = 5  # seconds between attempts on an instance that cannot take an address yet
INSTANCE_ATTEMPTS = 24  # two minutes: an instance is pending for well under one
# An instance EC2 does not know yet (InvalidInstanceID.NotFound, not listed) past those two minutes: EC2's reads may
# lag RunInstances for minutes ("Eventual consistency in the Amazon EC2 API": back off up to a few minutes). Tried
# this often, for as long as the launch may wait for an address (EipWaitSeconds), before the failure policy decides
UNKNOWN_INSTANCE_DELAY = 30  # seconds
# What EC2 refuses is asked again this often, 15, 30, 60 s apart, then the failure policy decides
REFUSED_ATTEMPTS = 4
REFUSED_DELAY = 15  # seconds
# Pool addresses EC2 refuses to associate that a look tries before it takes the refusal for the launch's
REFUSED_PER_LOOK = 2
# Pool addresses EC2 refused that a launch remembers (and skips): a look refused only addresses never tried before,
# others still untried, goes on at the next look past them, however many looks that takes, up to this many
MAX_REFUSED_KEPT = 32
# Records looked up per look to find the waiters ahead whose lifecycle is over (see _still_waiting); those found
# over are taken out of the line, so a run of them longer than this is got past in a few looks. A launch with
# no more waiters than this ahead of it checks them even when nothing is free, to look as the first in line once
# they wait for nothing (see _ahead)
RECORD_LOOKS = 10
MAX_RESTARTS = 3  # an assignment that did not hold is started over this often, then the launch fails
# No address to be had (an empty pool, the quota used up), waiters ahead in line: looked for again 15, 30, then
# every 60 s
EXHAUSTED_DELAY = 15  # seconds
EXHAUSTED_DELAY_MAX = 60
# The waiters first in a pool's line look this often: an address given back waits for one of them (a new launch
# yields to them), and it should not stay free a minute. The RELEASE_EIP that gives it back wakes them at once
# (nodecycle.domain.eip.wake): this look is what remains when that wake-up is lost
FIRST_IN_LINE_DELAY = 15  # seconds


class InstanceGroups(Protocol):
    """What ASSIGN_EIP asks Auto Scaling (``Autoscaling.lifecycle_state``)."""

    def lifecycle_state(self, instance_id: str) -> str | None: ...


class AssignAddress:
    def __init__(
        self,
        *,
        owner: str,
        policy: EipPolicy,
        addresses: Addresses,
        metrics: Metrics,
        lines: AddressLines,
        records: RecordStore,
        groups: InstanceGroups,
        waker: LineWaker | None = None,
        offers: Offers | None = None,
        refusals: Refusals | None = None,
    ) -> None:
        self._owner = owner
        # The address a release gave back offered to this launch, woken for it (None: its listing alone decides)
        self._offers = offers
        self._mode = policy.mode
        self._pool = policy.pool or ""
        self._grow_pool = policy.grow_pool
        self._abandon = policy.on_failure is EipFailurePolicy.ABANDON
        self._wait = policy.wait
        self._addresses = addresses
        self._metrics = metrics
        self._records = records  # (to tell a waiter whose lifecycle is over from one still waiting)
        self._groups = groups  # (to tell a waiting launch whose instance the group is terminating)
        # first come, first served among the launches waiting for the pool, or in allocate mode for the
        # quota (see nodecycle.domain.eip.line)
        self._line_pool = self._pool if self._mode is EipMode.POOL else None
        self._line = PoolLine(lines, line_key(owner, self._line_pool))
        self._lines = lines  # (and the address the deliveries of one message take: see _take_first)
        # The pool addresses EC2 refused lately to a launch of the line (None: each launch knows its own alone)
        self._refused_in_pool = (
            PoolRefusals(refusals, line_key(owner, self._pool))
            if refusals is not None and self._mode is EipMode.POOL
            else None
        )
        # The addresses the line told refused at this look (see _claim): one associated is told so no more
        self._told_refused: frozenset[str] = frozenset()
        # The address this call allocated (as the scratch remembers it), for a refusal that ends the call to keep:
        # see _remember
        self._allocation: dict[str, Any] | None = None
        # Wakes the first launches waiting in a line when this one leaves it without an address, or releases
        # spares under the quota (see nodecycle.domain.eip.wake); None: they find out at their own looks
        self._waker = waker

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        scratch: dict[str, Any] = dict(record.extra.get(SCRATCH) or {})
        self._told_refused = frozenset()  # (until this call's look reads them)
        self._allocation = None
        try:
            if self._mode is EipMode.OFF:
                # The plan was made while EIPs were on; the stack has turned them off since.
                log.info("EIP mode is off now: the launch goes on without an address")
                return Outcome.next(extra=without_scratch(record))
            if "verify" in scratch:
                return self._confirm(record, scratch, scratch["verify"]["allocation_id"], None)
            if scratch.get("exhausted_since"):
                gone = self._gone_while_waiting(record.instance_id)
                if gone is not None:
                    return self._instance_gone(record, gone)
            if self._mode is EipMode.POOL:
                return self._claim(record, scratch, now)
            return self._allocate(record, scratch, now)
        except TransientError as error:
            self._metrics.count("EipFailures")
            log.warning(
                "EC2 did not answer (throttled or unavailable); the step retries with backoff: %s", error
            )
            raise
        except AddressRefused as error:
            # A denial or a subnet without an internet gateway: asked again a few times, minutes apart (a
            # denial may be IAM still propagating after a stack update), then the policy decides, not the
            # global timeout hours on. An address allocated before the refusal is the sweeper's.
            if self._allocation is not None:
                # (refused after this call allocated: the wait keeps the allocation, which the next look takes;
                # forgotten, that look would allocate again while EC2 does not list the first one yet)
                scratch = {**scratch, "allocated": self._allocation}
            refused = int(scratch.get("refused", 0))
            onward = int(scratch.get("refused_onward", 0))  # (looks that went on past addresses refused)
            reason = f"EC2 refused: {error}"
            going_on = False
            if isinstance(error, _RefusedAddress):  # (not tried again: see _take_first)
                if self._refused_in_pool is not None:  # (nor counted free by the launches of the line)
                    self._refused_in_pool.add(error.allocation_ids, record.instance_id, now)
                known = _refused(scratch)
                fresh = [a for a in error.allocation_ids if a not in known]
                kept = [*known, *fresh][:MAX_REFUSED_KEPT]
                scratch = {**scratch, "refused_addresses": kept}
                # Refused only addresses never tried before, others untried: the refusals are as likely theirs as
                # the instance's, and the next look goes on past them (a pool of many refused addresses is got
                # through, however many looks that takes), until the launch remembers as many as it may. Once
                # none is left untried, the looks that went on count as the launch's tries: a pool of none but
                # refused addresses meets its policy once each was tried, as promptly as four looks allow
                going_on = (
                    error.untried > 0
                    and len(fresh) == len(error.allocation_ids)
                    and len(kept) < MAX_REFUSED_KEPT
                )
                reason = f"EC2 refused the {len(kept)} address(es) of pool {self._pool!r} tried: {error}"
            if going_on:
                onward += 1
            else:
                refused += 1
            tries = refused + (onward if isinstance(error, _RefusedAddress) else 0)
            if going_on or tries < REFUSED_ATTEMPTS:
                self._metrics.count("EipFailures")
                delay = REFUSED_DELAY if going_on else REFUSED_DELAY * 2 ** (refused - 1)
                if going_on:  # (not one of the launch's tries: it goes on past the addresses refused)
                    log.warning(
                        "%s; the next look goes on past them in %d s (other free addresses of the pool untried)",
                        reason,
                        delay,
                    )
                else:
                    log.warning(
                        "EC2 refused (%d of %d): %s; asked again in %d s",
                        tries,
                        REFUSED_ATTEMPTS,
                        error,
                        delay,
                    )
                counts = {"refused": refused, "refused_onward": onward}
                return Outcome.wait(delay, extra={**record.extra, SCRATCH: {**scratch, **counts}})
            if self._refused_in_pool is not None and _refused(scratch):
                # (every address it tried refused, to the end: as likely its own refusal as theirs, which told to
                # the line would keep the launches behind from them for REFUSED_FOR; theirs, they tell it again)
                self._refused_in_pool.withdraw(record.instance_id, now)
            return self._fail(record, reason)

    # -- allocate mode: a new address per instance ---------------------------------------------------

    def _allocate(self, record: LifecycleRecord, scratch: dict[str, Any], now: datetime) -> Outcome:
        instance = record.instance_id
        listed = self._addresses.find(self._owner, allocated_for=instance)
        scratch = _seen(scratch, listed)
        found = self._with_allocated(listed, scratch)
        held = _held(found, instance)
        if held is not None:
            log.info("instance %s holds address %s already (a redelivery): kept", instance, held.public_ip)
            return self._done(record, held, found)
        other = self._held_elsewhere(instance)
        if other is not None:
            return self._fail(record, other)
        if not _unassociated(found, now) and "allocated" in scratch:
            outcome, scratch = self._own_past_taking(record, scratch, listed, now)
            if outcome is not None:
                return outcome
        if not _unassociated(found, now):
            ahead, line = self._ahead(record, scratch, self._line.read(), found, [], now, quota=True)
            if ahead:
                # They wait for the quota: an address freed goes to the first of them, woken by the release that
                # frees it (or at its look, every 15 s), not to a launch that came after
                reason = f"address quota exceeded: {len(ahead)} launch(es) wait first"
                return self._exhausted(record, scratch, now, reason, line=line, ahead=len(ahead))
            leaving = self._leaving(record, scratch)
            if leaving is not None:
                return self._instance_gone(record, leaving)
            try:
                allocated = self._addresses.allocate(self._tags(record, now))
            except AddressLimitExceeded:
                # Another delivery of this message may have allocated for the instance since the listing, and
                # taken the quota's last address doing so: that address is this launch's as well.
                found = self._addresses.find(self._owner, allocated_for=instance)
                if _held(found, instance) is None and not _unassociated(found, now):
                    # (none of them to take: an address allocated for the instance longer than TAKE_OWN_WITHIN ago
                    # may be what fills the quota, the sweeper's, which frees it at its grace and wakes the line;
                    # started over, the launch failed after MAX_RESTARTS, seconds apart)
                    return self._exhausted(record, scratch, now, "address quota exceeded", line=line, ahead=0)
                log.info("the address quota is used up, by an address allocated for instance %s", instance)
            else:
                self._metrics.count("EipsAllocated")
                log.info(
                    "allocated Elastic IP %s for instance %s",
                    allocated.public_ip,
                    instance,
                    extra={"allocation_id": allocated.allocation_id},
                )
                # Another delivery of this message may be allocating at this very moment: looking again lets
                # both converge on the lowest allocation id; the spare is released once one holds.
                scratch = self._remember(scratch, allocated)
                try:
                    again = self._addresses.find(self._owner, allocated_for=instance)
                except TransientError as error:
                    waited = self._keeping_the_allocation(
                        record, scratch, error, "the addresses allocated for the instance were not listed"
                    )
                    if waited is None:
                        raise
                    return waited
                found = distinct(again, [allocated])
            held = _held(found, instance)
            if held is not None:
                return self._done(record, held, found)
        outcome = self._take_first(record, now, scratch, _unassociated(found, now), found)
        if outcome is not None:
            return outcome
        return self._start_over(
            record, scratch, "the addresses allocated for the instance were taken or released"
        )

    # -- pool mode: claim a free address of the pool, return it at terminate ----------------------------

    def _claim(self, record: LifecycleRecord, scratch: dict[str, Any], now: datetime) -> Outcome:
        instance = record.instance_id
        listed = self._addresses.find(self._owner, pool=self._pool)
        scratch = _seen(scratch, listed)
        found = self._with_allocated(listed, scratch)
        held = _held(found, instance)
        if held is not None:
            log.info(
                "instance %s holds pool address %s already (a redelivery): kept", instance, held.public_ip
            )
            return self._done(record, held, found)
        other = self._held_elsewhere(instance)
        if other is not None:
            return self._fail(record, other)
        free = [address for address in found if not address.associated]
        # An address that an earlier delivery grew the pool by for this very instance comes first (no second
        # allocation), whoever waits; the others in an order of the instance's own: concurrent launches of
        # other instances rarely reach for the same address, and two deliveries of one launch (SQS delivers at
        # least once) reach for the same one, so that one associates it and the other finds it on the instance.
        # In different orders, each would associate its own, and EC2 would move the first off the instance.
        own = [address for address in free if address.allocated_for == instance]
        shared = [address for address in free if address.allocated_for != instance]
        line = self._line.read()
        # (the addresses EC2 refused to a launch of the line lately: no launch counts them free against those ahead
        # of it, and one with no one ahead tries them last: the refusal may be the instance's. Read whether launches
        # wait or not: in a burst none waits yet, and each launch tried every refused address, one refused
        # AssociateAddress and an EipFailure each)
        refused, refused_to_many = (
            self._refused_in_pool.read_both(now)
            if self._refused_in_pool and shared
            else (frozenset[str](), frozenset[str]())
        )
        self._told_refused = refused
        usable = [address for address in shared if address.allocation_id not in refused]
        ahead, line = self._ahead(record, scratch, line, found, usable, now, quota=self._grow_pool)
        if (
            shared
            and not own
            and not ahead
            and not scratch.get("exhausted_since")
            and not _refused(scratch)
            and all(address.allocation_id in refused_to_many for address in shared)
        ):
            # Nothing free but addresses EC2 refused lately to two launches or more (a policy on their tags): a
            # launch new to them waits in line as for an empty pool (or grows the pool past them), and, first in
            # line, tries them last at its next look, rather than each launch of a burst trying each of them. (A
            # launch refused them itself goes on to its policy; an address refused to one launch alone may be
            # that launch's refusal, and is tried; a refusal is told REFUSED_FOR after its last, then tried again.)
            log.info(
                "the %d free address(es) of pool %r were refused lately to launches of its line: instance %s "
                "waits for another",
                len(shared),
                self._pool,
                instance,
            )
            shared = []
        if ahead and shared and len(ahead) >= len(usable):
            log.info(
                "%d free address(es) of pool %r go to the %d launch(es) waiting longer than instance %s (%d more "
                "free, refused lately)",
                len(usable),
                self._pool,
                len(ahead),
                instance,
                len(shared) - len(usable),
            )
            shared = []
        others = sorted(
            shared,
            key=lambda address: (address.allocation_id in refused, _draw(instance, address.allocation_id)),
        )
        if own or others or (self._grow_pool and not ahead):
            leaving = self._leaving(record, scratch)
            if leaving is not None:
                return self._instance_gone(record, leaving)
        candidates = [*own, *others]
        outcome = self._take_first(record, now, scratch, candidates, found)
        if outcome is not None:
            return outcome
        if not own and not others:
            outcome, scratch = self._take_offered(record, scratch, now, found)
            if outcome is not None:
                return outcome
        if not self._grow_pool:
            return self._exhausted(
                record,
                scratch,
                now,
                f"address pool {self._pool!r} is empty",
                line=line,
                ahead=len(ahead),
                listed=found,
            )
        if ahead:
            # They wait for the quota (they found the pool empty and could not grow it): one freed goes to the
            # first of them, woken by the release that frees it (or at its look, every 15 s), not to a launch
            # that came after
            return self._exhausted(
                record,
                scratch,
                now,
                f"address pool {self._pool!r} is empty and {len(ahead)} launch(es) wait for the quota first",
                line=line,
                ahead=len(ahead),
                listed=found,
            )
        try:
            # (its own tag says it was allocated into the pool: never released, should its pool tag go)
            allocated = self._addresses.allocate(
                {**self._tags(record, now), POOL_TAG: self._pool, ALLOCATED_INTO_TAG: self._pool}
            )
        except AddressLimitExceeded:
            # Another delivery of this message may have grown the pool for the instance since the listing, and
            # taken the quota's last address doing so: that address is this launch's as well.
            found = self._addresses.find(self._owner, pool=self._pool)
            held = _held(found, instance)
            if held is not None:
                return self._done(record, held, found)
            own = [a for a in found if a.allocated_for == instance and not a.associated]
            outcome = self._take_first(record, now, scratch, own, found)
            if outcome is not None:
                return outcome
            # (the free addresses it went past, refused before: no new one to take instead, they are asked again)
            refused_before = [a for a in candidates if a.allocation_id in _refused(scratch)]
            outcome = self._take_first(record, now, scratch, refused_before, found, grow=False)
            if outcome is not None:
                return outcome
            return self._exhausted(
                record,
                scratch,
                now,
                f"address pool {self._pool!r} is empty and the address quota exceeded",
                ahead=len(ahead),
            )
        self._metrics.count("EipsAllocated")
        log.info("address pool %r is empty: allocated %s into it", self._pool, allocated.public_ip)
        outcome = self._take_first(
            record, now, self._remember(scratch, allocated), [allocated], [*found, allocated]
        )
        if outcome is not None:
            return outcome
        return self._start_over(record, scratch, "another launch claimed the new pool address first")

    def _take_offered(
        self, record: LifecycleRecord, scratch: dict[str, Any], now: datetime, found: list[Address]
    ) -> tuple[Outcome | None, dict[str, Any]]:
        """A launch in line whose listing shows nothing free for it: the address a release gave back and offered
        to it, woken for it (nodecycle.domain.eip.wake), which EC2's reads may not show free yet. Associated
        directly: EC2 decides on its own state, AllowReassociation false, so one taken since is refused, not
        moved (the look goes on as before). Tried once per association ended, within OFFERED_FOR of its release.
        Not knowing the offer now (the table throttling) is no reason to fail the look. Returns the outcome (None:
        not taken) and the scratch to go on with."""
        if self._offers is None or not scratch.get("exhausted_since"):
            return None, scratch
        try:
            offer = self._offers.offered(line_key(self._owner, self._line_pool), record.id)
        except TransientError as error:
            log.info("could not read the address offered to this launch: %s", error)
            return None, scratch
        if (
            offer is None
            or offer.pool != self._pool
            or offer.ended == scratch.get("offered")
            # (either way: the release ran in another container, whose clock may be a little ahead)
            or abs(now - offer.at) > OFFERED_FOR
        ):
            return None, scratch
        leaving = self._leaving(record, scratch)
        if leaving is not None:
            return self._instance_gone(record, leaving), scratch
        # (the association the release ended, which a read behind it still shows: see _confirm)
        scratch = {**scratch, "offered": offer.ended}
        log.info(
            "address %s was given back and offered to instance %s: associating it (not listed free yet)",
            offer.public_ip,
            record.instance_id,
        )
        address = Address(
            allocation_id=offer.allocation_id,
            public_ip=offer.public_ip,
            tags={OWNER_TAG: self._owner, POOL_TAG: offer.pool},
        )
        return self._take_first(record, now, scratch, [address], found), scratch

    def _ahead(
        self,
        record: LifecycleRecord,
        scratch: dict[str, Any],
        line: Line,
        found: list[Address],
        free: list[Address],
        now: datetime,
        *,
        quota: bool,
    ) -> tuple[list[Waiter], Line]:
        """The waiters of the line that take the ``free`` addresses (and, ``quota``, the quota) before this
        launch: those in line before it (it is in line since it first found no address; a new launch, from
        now) that still wait; and the line, as this launch leaves it."""
        if not line.waiters:
            return [], line
        since = _since(scratch, now)
        served = {address.instance_id for address in found if address.instance_id is not None}
        ahead = ahead_of(line, record.id, record.instance_id, since, now, served)
        if ahead and (len(ahead) >= len(free) > 0 or (not free and quota)):
            # They would keep a free address (or, in a pool that may grow, the quota) from this launch: those
            # whose instance is gone (terminated while waiting, its launch over) or whose lifecycle is over do not
            return self._waiting(ahead, len(free) if free else 1, line, now)
        if ahead and not free and len(ahead) <= RECORD_LOOKS:
            # Nothing free: they would keep this launch from looking as the first in line does (an address given
            # back would wait for its look, a minute, while those ahead wait for nothing). Only how often it
            # looks depends on it: EC2 or the table not telling now is no reason to fail or retry the look.
            try:
                return self._waiting(ahead, 1, line, now)
            except (AddressRefused, TransientError) as error:
                log.info("could not tell whether the %d launch(es) ahead still wait: %s", len(ahead), error)
        return ahead, line

    def _waiting(
        self, ahead: list[Waiter], takers: int, line: Line, now: datetime
    ) -> tuple[list[Waiter], Line]:
        """``ahead`` less those whose instance is gone (one DescribeInstances for them all) and, among the
        first ``takers``, those whose lifecycle is over (taken out of the line); and the line as left. An instance
        EC2 does not list is not gone: right after RunInstances EC2 may not list it yet (eventually consistent),
        and its launch, first in line, would lose its place to a later one; one EC2 no longer lists (terminated
        an hour ago) has its lifecycle over, which ``_still_waiting`` finds."""
        states = self._addresses.instance_states([waiter.instance_id for waiter in ahead])
        ahead = [waiter for waiter in ahead if states.get(waiter.instance_id) not in GONE_STATES]
        ahead, over = self._still_waiting(ahead, takers)
        if over:
            line = self._drop(over, line, now)
        return ahead, line

    def _still_waiting(self, ahead: list[Waiter], takers: int) -> tuple[list[Waiter], list[str]]:
        """``ahead`` less the waiters among the first ``takers`` (those that would take what is to be had) whose
        lifecycle is over or past this step (its action completed by hand, or found lapsed by the engine, while
        it waited: nothing took it out of the line), looked up by record, at most ``RECORD_LOOKS`` of them: one
        GetItem each, only when they keep an address from this launch; and the lifecycles found over. A waiter
        further back that is over counts until a look finds it so (or its wait ends)."""
        kept: list[Waiter] = []
        over: list[str] = []
        for waiter in ahead:
            if len(kept) < takers and len(kept) + len(over) < RECORD_LOOKS:
                record = self._records.get(waiter.lifecycle)
                if record is None or record.finished or record.step is not Step.ASSIGN_EIP:
                    log.info("launch %s waits no more (its lifecycle is over): out of line", waiter.lifecycle)
                    over.append(waiter.lifecycle)
                    continue
            kept.append(waiter)
        return kept, over

    def _drop(self, over: list[str], line: Line, now: datetime) -> Line:
        """The line without the waiters whose lifecycle is over, so the looks behind them need not find them
        over again (nothing else takes them out before their wait ends): one write over the line as read; one
        that fails (another writer came first) is made by the next look that finds them."""
        try:
            dropped = self._line.drop(over, line, now)
        except TransientError as error:
            log.warning("could not take %d launch(es) over out of the line: %s", len(over), error)
            return line
        return dropped if dropped is not None else line

    def _gone_while_waiting(self, instance: str) -> str | None:
        """The state of a waiting launch's instance, when it is gone (shutting down or terminated: an operator,
        a scale-in of an instance not yet in service); None otherwise, or when EC2 does not tell now (the look
        goes on as before: not knowing is no reason to fail it). One DescribeInstances per look of a launch in
        line, 15 to 60 s apart."""
        try:
            state = self._addresses.instance_states([instance]).get(instance)
        except (AddressRefused, TransientError) as error:
            log.info("could not tell whether instance %s is still there: %s", instance, error)
            return None
        return state if state in GONE_STATES else None

    def _leaving(self, record: LifecycleRecord, scratch: dict[str, Any]) -> str | None:
        """The Auto Scaling state of a launch's instance about to take an address after waiting for one, when
        the group is terminating it; None otherwise, or when Auto Scaling does not say now (it takes the address,
        as before: not knowing is no reason to keep it from a live launch). A launch in line has not asked Auto
        Scaling about its action for as long as it waited, and its instance may be on its way out, running in
        EC2 while terminate hooks hold it (its launch action ended with the termination): an address it took
        would stay with it until EC2 terminates it, kept from the launches behind it (in allocate mode, the
        quota's, the address then left to the sweeper). One DescribeAutoScalingInstances, only as it takes
        one.

        An instance no group lists is taken for one still there, where ``engine.ended_with_its_instance`` (the
        same launch, its action confirmed, then found gone by a heartbeat) takes it for one that left its group:
        deliberately. There the action is over already, and only how its end is counted depends on the answer;
        here a wrong "gone" would keep an address from a live launch, while a gone instance taken for one still
        there costs one refused call: EC2 refuses to associate an address with an instance that is shutting
        down or terminated, and the step then ends the launch as ``instance-gone`` (``_instance_unavailable``)."""
        if not scratch.get("exhausted_since"):
            return None  # (a launch that did not wait: its action was confirmed moments ago)
        return self._terminating(record)

    def _terminating(self, record: LifecycleRecord) -> str | None:
        """The Auto Scaling state of the launch's instance when its group is terminating it, or has sent it back
        to its warm pool (see ``engine.left_its_group``); None otherwise, or when Auto Scaling does not say now."""
        try:
            state = self._groups.lifecycle_state(record.instance_id)
        except TransientError as error:
            log.info("could not tell whether instance %s is terminating: %s", record.instance_id, error)
            return None
        return state if state is not None and left_its_group(record, state) else None

    def _going(self, record: LifecycleRecord) -> str | None:
        """Why the launch's instance will take no address: gone in EC2 (shutting down, terminated), or being
        terminated by its group (running in EC2 while terminate hooks hold it); None otherwise, or when neither
        tells now (the launch goes on as before)."""
        return self._gone_while_waiting(record.instance_id) or self._terminating(record)

    def _instance_gone(self, record: LifecycleRecord, state: str, *, released: int = 0) -> Outcome:
        """A launch waiting for (or taking) an address whose instance went meanwhile: its action went with it
        (Auto Scaling ends the launch action of an instance it terminates), and nothing is to be had for it. It
        leaves the line and its lifecycle ends past its completion, at once: looking on until its wait ended
        would count an EIP failure (the EipFailures alarm) for an address no one needs, and a heartbeat due
        meanwhile would find the action gone and count it expired (the expired-actions alarm); its completion,
        too, would heartbeat first when one is due. Not counted as an EIP failure: no address was missing for a
        live instance. ``released``: the spare addresses released for it, room under the quota."""
        self._leave_line(record, record.updated_at, holding=False, released=released)
        log.warning(
            "instance %s is %s while its launch is given an Elastic IP: the launch ends without one",
            record.instance_id,
            state,
        )
        return Outcome.goto(after_completion(record), outcome="instance-gone", extra=without_scratch(record))

    def _gone_with_spares(self, record: LifecycleRecord, state: str) -> Outcome:
        """``_instance_gone``, the addresses allocated for the launch released first (allocate mode: a pool's stay
        in the pool, unassociated) when EC2 says the instance is gone (``state`` one of its GONE_STATES). One its
        group is terminating (an Auto Scaling ``state``) runs while it drains: its address may be on it, in use,
        which a read behind EC2's writes shows free (and a default VPC releases without a word); the instance's own
        release takes back what is allocated for it after the drain, the sweeper what that release does not list."""
        released = 0
        if self._mode is EipMode.ALLOCATE and state in GONE_STATES:
            released = self._release_spares(record, keep=None, found=None)
        return self._instance_gone(record, state, released=released)

    def ended_in_line(self, record: LifecycleRecord, now: datetime) -> None:
        """The engine moved on a launch waiting in line without this step (the global-timeout guard settled its
        action, or a heartbeat found it lapsed: timed out, completed by an operator): it leaves the line as one
        that gives up does, waking the next waiter, which may be first now with an address free for it (the one
        this launch was woken for). Otherwise that address idles until the next waiter's own look, and the launch
        ended keeps its place until a look behind it finds its lifecycle over. Never raises: the engine has
        committed the launch's end already; a failure costs the waiters time (their own looks remain)."""
        try:
            self._leave_line(record, now, holding=False)
        except Exception:
            log.exception("launch %s ended in line: could not leave it or wake the next", record.id)

    def _leave_line(
        self, record: LifecycleRecord, now: datetime, *, holding: bool, released: int = 0
    ) -> None:
        """Out of the pool's line, if it joined it: it holds its address, or gives up. A failure to write is
        no reason to fail the launch: the line no longer counts a waiter whose instance holds an address of
        the pool, nor one past its wait.

        One that leaves without an address (``holding`` false: its wait over, its instance gone) wakes the next
        waiter: that one may be first now, with an address free for it (the one this launch was woken for, or
        one it kept from the waiters behind it), and would otherwise find out at its own look, a minute apart
        for one that was not first. A launch leaving with its address took one free address and one place
        ahead of the others: none of them may take more than before, and none is woken. ``released``: spare
        addresses it released under the quota (in line or not), one launch woken for each."""
        woken = released
        if (record.extra.get(SCRATCH) or {}).get("exhausted_since"):
            try:
                self._line.leave(record.id, now)
            except TransientError as error:
                log.warning(
                    "could not leave the line of pool %r (it no longer counts this launch): %s",
                    self._pool,
                    error,
                )
            woken += 0 if holding else 1
        self._wake_line(record, woken, now)

    def _wake_line(self, record: LifecycleRecord, count: int, now: datetime) -> None:
        """Wake the first ``count`` launches waiting in this launch's line (never this one, nor failing it)."""
        if self._waker is not None and count > 0:
            self._waker.given_back({self._line_pool: count}, now, passing_over=record.id)

    # -- association and its verification ------------------------------------------------------------

    def _with_allocated(self, found: list[Address], scratch: dict[str, Any]) -> list[Address]:
        """``found``, and the address an earlier run of this launch allocated, should EC2 not list it yet (it
        is eventually consistent): the launch associates that one rather than allocate another."""
        allocated = scratch.get("allocated")
        if allocated is None:
            return found
        address = Address(
            allocation_id=allocated["allocation_id"],
            public_ip=allocated["public_ip"],
            tags=dict(allocated["tags"]),
        )
        if address.pool != (self._pool if self._mode is EipMode.POOL else None):
            return found  # (the mode or the pool changed since: the listing of the other one is not this)
        return distinct(found, [address])

    def _held_elsewhere(self, instance: str) -> str | None:
        """Why the instance must get no address, when it holds one on its primary private IP that this stack
        did not allocate or claim for it (another stack's, an operator's): an association would move it off."""
        for address in self._addresses.on_primary_ip(instance):
            # (one of ours for this instance is a concurrent delivery's, associated since the listing)
            for_it = address.allocated_for == instance or (bool(self._pool) and address.pool == self._pool)
            if address.tags.get(OWNER_TAG) != self._owner or not for_it:
                owner = address.tags.get(OWNER_TAG) or "not nodecycle"
                log.error(
                    "instance %s holds address %s (owner %s) already: it is not moved for another",
                    instance,
                    address.public_ip,
                    owner,
                )
                return f"the instance holds address {address.public_ip} (owner {owner}) already"
        return None

    def _unseen(
        self, record: LifecycleRecord, now: datetime, scratch: dict[str, Any], address: Address, unseen: int
    ) -> Outcome:
        """The launch's own new address, unknown to EC2 at this try: tried again further apart each time (in
        allocate mode only while younger than TAKE_OWN_WITHIN; then waited for, to be released once EC2 shows it),
        for as long as the launch may wait for an address (EipWaitSeconds from its allocation, TAKE_OWN_WITHIN at
        least); then the failure policy decides, the address left to the sweeper (which releases it once EC2 shows
        it, past its grace). Never another allocated meanwhile: one launch, one address."""
        allocated = scratch["allocated"]
        if unseen >= UNSEEN_TRIES:
            # Unknown for a minute: the instance may be going, its release having freed the address before EC2
            # showed it (tries on, ten minutes by default, then a failure counted and the policy, for nothing). A
            # look per try from then on, 30 s apart (DescribeInstances, and DescribeAutoScalingInstances unless EC2
            # tells the instance gone: see _going): an abnormal path
            going = self._going(record)
            if going is not None:
                return self._gone_with_spares(record, going)
        since = address.allocated_at
        waited = now - since if since is not None else timedelta(0)
        if waited >= max(self._wait, TAKE_OWN_WITHIN):
            return self._fail(
                record,
                f"address {address.public_ip}, allocated for the launch {waited.total_seconds():.0f} s ago, is "
                "still unknown to EC2: left to the sweeper",
            )
        log.info(
            "address %s, allocated for this launch, is not known to EC2 yet: associated again shortly",
            address.public_ip,
        )
        return _wait(record, verify_delay(unseen), {**scratch, "allocated": {**allocated, "unseen": unseen}})

    def _own_past_taking(
        self, record: LifecycleRecord, scratch: dict[str, Any], listed: list[Address], now: datetime
    ) -> tuple[Outcome | None, dict[str, Any]]:
        """Before a launch allocates again: the address it allocated itself (``scratch["allocated"]``), which it
        no longer takes (older than TAKE_OWN_WITHIN: the sweeper's by then). Released first, so that the launch
        never holds two (one it may not see associated yet, or that would linger unassociated until the sweeper's
        grace): released, or gone (listed before, and not now: the sweeper's release), the launch allocates
        another; one EC2 says is in use is looked at again; one EC2 has never shown is waited for (``_unseen``).
        Returns the outcome when the launch must not allocate now, and the scratch to go on with."""
        allocated = scratch["allocated"]
        mine = next((a for a in listed if a.allocation_id == allocated["allocation_id"]), None)
        if mine is None and not allocated.get("seen"):
            address = Address(
                allocation_id=allocated["allocation_id"],
                public_ip=allocated["public_ip"],
                tags=allocated["tags"],
            )
            return self._unseen(record, now, scratch, address, int(allocated.get("unseen", 0)) + 1), scratch
        if mine is not None and not mine.associated:
            try:
                released = release_unassociated(self._addresses, mine.allocation_id)
            except AddressInUse:
                log.info("address %s of this launch is in use: looking at it again shortly", mine.public_ip)
                return _wait(record, VERIFY_DELAY, scratch), scratch
            if released:
                self._metrics.count("EipsReleased")
                log.info(
                    "released address %s, allocated for this launch at %s, before allocating another (the "
                    "sweeper's to release by now, never taken)",
                    mine.public_ip,
                    mine.allocated_at,
                )
            else:
                # (gone meanwhile, the sweeper's release; or a pool's now, tagged into one by hand: kept)
                log.info(
                    "address %s, allocated for this launch at %s, is gone or a pool's now (not released): "
                    "allocating another",
                    mine.public_ip,
                    mine.allocated_at,
                )
        return None, {key: value for key, value in scratch.items() if key != "allocated"}

    def _take_first(
        self,
        record: LifecycleRecord,
        now: datetime,
        scratch: dict[str, Any],
        candidates: list[Address],
        found: list[Address],
        *,
        grow: bool = True,
    ) -> Outcome | None:
        """Associate the first of ``candidates`` to be had; None when none is (each taken first, or gone).
        ``grow`` False: the pool may not grow past candidates refused before (see ``_grows_past``).

        The deliveries of one message that run at once take the same address: the one the first of them wrote
        for the message (``AddressLines.taking``), another only once EC2 refused that one. Each decides on its
        own listing, and EC2's reads lag its writes: a delivery that does not see the other's association yet
        would take another address, and EC2, associating it with the instance, moves the first off it (an
        address given back moments ago that one listing shows free and the other not; in allocate mode, each
        delivery's own allocation, unknown to the other). One that cannot take the address written (not free as
        it sees it, or unknown to it yet) verifies that address instead, as if it had associated it: whichever
        delivery commits, the launch goes on with the address associated."""
        run = f"{record.id}#{record.seq}"
        refused: str | None = None
        refusal: _RefusedAddress | None = None
        # (the addresses refused at earlier looks are not tried again: an instance every address is refused to
        # meets its policy after REFUSED_ATTEMPTS looks of REFUSED_PER_LOOK calls each, not one per pool address)
        refused_before = _refused(scratch)
        left = [a for a in candidates if a.allocation_id not in refused_before]
        asked_again = bool(candidates) and not left
        if asked_again and not (grow and self._grows_past(record, candidates, refused_before)):
            left = list(candidates)
        while left:
            address = left.pop(0)
            try:
                chosen = self._lines.taking(run, address.allocation_id, refused)
            except TransientError as error:
                waited = self._keeping_the_allocation(
                    record, scratch, error, "the address this launch takes was not written"
                )
                if waited is None:
                    raise  # (nothing this step alone knows of, or a refusal: the engine's to retry or report)
                return waited
            if chosen != address.allocation_id:
                theirs = next((a for a in left if a.allocation_id == chosen), None)
                if theirs is None:
                    log.info(
                        "another delivery of this launch is taking address %s (not free as this one sees it): "
                        "verifying it",
                        chosen,
                    )
                    verify = {"allocation_id": chosen, "reads": 0, "theirs": True}
                    return _wait(record, VERIFY_DELAY, {**scratch, "verify": verify})
                left = [address, *(a for a in left if a is not theirs)]
                address = theirs
            try:
                outcome = self._take(record, now, scratch, address, found)
            except TransientError as error:
                # (AssociateAddress, or the read of the association after it, throttled past botocore's retries,
                # out of the run's time, or a 5xx: as for the write above)
                waited = self._keeping_the_allocation(
                    record, scratch, error, f"the association of address {address.public_ip} went unanswered"
                )
                if waited is None:
                    raise
                return waited
            except _RefusedAddress as error:
                # That address's refusal (a policy on its tags, a range the role may not use), not the launch's:
                # another free one of the pool is taken. Refused REFUSED_PER_LOOK times (or by every candidate),
                # the refusal is raised: the step asks again (not those addresses), then its policy decides. Told
                # each time: an operator fixes what refuses the address
                self._metrics.count("EipFailures")
                log.error(
                    "EC2 refused to associate address %s with instance %s: %s; trying the next",
                    address.public_ip,
                    record.instance_id,
                    error,
                )
                refusal = _RefusedAddress(
                    str(error), [*(refusal.allocation_ids if refusal else []), address.allocation_id]
                )
                refused = address.allocation_id
                if len(refusal.allocation_ids) >= REFUSED_PER_LOOK:
                    break  # (refused twice in a row: the launch's refusal as likely as the addresses')
                continue
            if outcome is not None:
                return outcome
            refused = address.allocation_id
        if refusal is not None:
            refusal.untried = 0 if asked_again else len(left)
            refused_now = [*refused_before, *refusal.allocation_ids]
            if (
                not refusal.untried
                and not asked_again
                and grow
                and self._grows_past(record, candidates, refused_now)
            ):
                refusal.untried = 1  # (the address the pool grows by past them, at the next look)
            raise refusal
        return None

    def _remember(self, scratch: dict[str, Any], allocated: Address) -> dict[str, Any]:
        """The scratch remembering the address this call allocated; remembered for this call's refusal too.

        Only the scratch remembers the allocation, and the scratch a refusal's wait commits is the one the call
        started with: an association refused right after the allocation (a denial still propagating, a subnet
        without an internet gateway) would leave the next look, 15 s on, to allocate again while EC2 does not list
        the first address yet (its reads lag its writes): two addresses for the instance, one of them unassociated
        until the sweeper's grace, or a pool that grows when empty grown by two, for good."""
        scratch = _allocated(scratch, allocated)
        self._allocation = scratch["allocated"]
        return scratch

    def _keeping_the_allocation(
        self, record: LifecycleRecord, scratch: dict[str, Any], error: TransientError, what: str
    ) -> Outcome | None:
        """A wait that keeps the address this launch allocated, when a call after its allocation went unanswered;
        None when there is none to keep, the call was refused (the engine's to retry or report), or calls went
        unanswered VERIFY_READS times (then the engine's retries, with their backoff).

        Only this step's scratch remembers that allocation, and a step that raises never commits it: retried by the
        engine a second or two later, the launch would allocate again under EC2's lag (the first address not listed
        yet), and leave the instance two addresses, one of them unassociated until the sweeper's grace (a pool that
        grows when empty: grown by two, for good). Waited for instead, the allocation kept, the next run takes it."""
        unanswered = int(scratch.get("unwritten", 0)) + 1  # (calls unanswered since the allocation)
        if "allocated" not in scratch or isinstance(error, AccessRefused) or unanswered >= VERIFY_READS:
            return None
        self._metrics.count("EipFailures")
        log.warning("%s (%s): tried again shortly, with the address allocated for it", what, error)
        return _wait(record, verify_delay(unanswered), {**scratch, "unwritten": unanswered})

    def _grows_past(
        self, record: LifecycleRecord, candidates: list[Address], refused_before: list[str]
    ) -> bool:
        """Whether a look whose every candidate EC2 refused before goes past them, to grow the pool (a refusal of
        those addresses, a policy on their tags: a new address may be taken), rather than ask EC2 for them again.
        Not once an address the launch grew the pool by was refused too (the refusal the instance's): found
        "nothing free", the launch would grow the pool by one at every look (never released), or, the pool not
        growing, wait in line for addresses it is refused, ahead of the launches EC2 gives them to."""
        return self._grow_pool and not any(
            a.allocated_for == record.instance_id and a.allocation_id in refused_before for a in candidates
        )

    def _take(
        self,
        record: LifecycleRecord,
        now: datetime,
        scratch: dict[str, Any],
        address: Address,
        found: list[Address],
    ) -> Outcome | None:
        """Associate ``address`` with the instance; None when it is not to be had (taken first, or gone)."""
        instance = record.instance_id
        try:
            association = self._addresses.associate(address.allocation_id, instance)
        except AddressAlreadyAssociated:
            scratch = _seen(scratch, [address])  # (EC2 knows it: it refused it as associated)
            current = self._current(address.allocation_id)
            if current is not None and current.instance_id == instance:
                log.info(
                    "address %s was associated with instance %s by a concurrent delivery",
                    address.public_ip,
                    instance,
                )
                return self._done(record, current, found)
            unshown = int(scratch.get("unshown", 0)) + 1
            if (current is None or not current.associated) and unshown < VERIFY_READS:
                # EC2 refused it as associated, and its read does not show with what yet (it lags the
                # association): it may be this very instance's, made by another delivery of the launch, which
                # another address taken now would move off the instance. Looked at again before another is taken
                log.info(
                    "address %s is associated, EC2 does not show with what yet: looking again shortly",
                    address.public_ip,
                )
                return _wait(record, verify_delay(unshown), {**scratch, "unshown": unshown})
            log.info(
                "address %s is associated elsewhere (refused, not moved): trying the next", address.public_ip
            )
            return None
        except AddressNotFound:
            allocated = scratch.get("allocated")
            if allocated is not None and allocated["allocation_id"] == address.allocation_id:
                unseen = int(allocated.get("unseen", 0)) + 1
                if unseen < UNSEEN_TRIES or not allocated.get("seen") or self._still_there(address):
                    # Never known to EC2 yet (no listing showed it, no association took it): EC2 not knowing it yet,
                    # however long its reads lag. Taken for released, the launch would allocate another, and hold
                    # two once this one shows; so it is tried again, then the failure policy decides (see _unseen).
                    # So too one EC2 still has, though it refused it for a minute (see _still_there)
                    return self._unseen(record, now, scratch, address, unseen)
            going = self._going(record)  # (released by the release of an instance going: no failure)
            if going is not None:
                return self._gone_with_spares(record, going)
            self._metrics.count("EipFailures")
            log.warning("address %s was released behind our back: trying the next", address.allocation_id)
            return None
        except InstanceUnavailable:
            return self._instance_unavailable(record, now, scratch)
        except InstanceRefused:
            # (the instance's refusal, whatever the address: a VPC without an internet gateway, an instance tagged
            # for another owner. No other is tried, nor is this one told refused to the pool's line, whose other
            # launches EC2 may give it; asked again, then the policy decides)
            raise
        except AddressRefused as error:
            if address.pool is None:
                raise  # (the launch's own address: no other to take)
            raise _RefusedAddress(str(error), [address.allocation_id]) from error
        scratch = _seen(scratch, [address])  # (EC2 knows it: it took it)
        if address.pool is not None:
            self._metrics.count("EipsClaimed")
            if self._refused_in_pool is not None and (
                address.allocation_id in self._told_refused or address.allocation_id in _refused(scratch)
            ):
                # (refused before, associated now: the refusal was the instance's, IAM's, or a condition since changed)
                self._refused_in_pool.taken(address.allocation_id, now)
        log.info(
            "associated %s with instance %s; verifying",
            address.public_ip,
            instance,
            extra={"allocation_id": address.allocation_id, "association_id": association},
        )
        return self._confirm(record, scratch, address.allocation_id, found)

    def _confirm(
        self,
        record: LifecycleRecord,
        scratch: dict[str, Any],
        allocation_id: str,
        found: list[Address] | None,
    ) -> Outcome:
        """Go on only once DescribeAddresses shows the association (it is eventually consistent)."""
        current: Address | None
        try:
            current = self._addresses.describe(allocation_id)
        except AddressNotFound:
            theirs = bool(scratch.get("verify", {}).get("theirs"))
            if not theirs and (scratch.get("allocated") or {}).get("allocation_id") != allocation_id:
                return self._start_over(
                    record, scratch, f"address {allocation_id} was released behind our back", failed=True
                )
            current = (
                None  # allocated for this launch moments ago (by this delivery or another): not known yet
            )
        if current is not None and current.instance_id == record.instance_id:
            return self._done(record, current, found)
        ended = scratch.get("offered")
        if current is not None and ended is not None and current.association_id == ended:
            # The association a release ended and offered the address from: a read behind EC2's writes (association
            # ids are never reused), not the address taken. Read again, as one that does not show yet
            current = Address(
                allocation_id=current.allocation_id, public_ip=current.public_ip, tags=current.tags
            )
        if current is not None and current.associated:
            holder = current.instance_id or "a network interface"
            return self._start_over(
                record, scratch, f"address {current.public_ip} is associated with {holder}"
            )
        reads = int(scratch.get("verify", {}).get("reads", 0)) + 1
        if reads >= VERIFY_READS and current is None:
            reason = f"address {allocation_id} was released behind our back (unknown to EC2 in {reads} reads)"
            return self._start_over(record, scratch, reason, failed=True)
        shown = current.public_ip if current is not None else allocation_id
        if reads >= VERIFY_READS:
            return self._start_over(
                record, scratch, f"the association of {shown} did not show in {reads} reads"
            )
        log.info("the association of %s does not show yet: verifying again shortly", shown)
        verify = {**scratch.get("verify", {}), "allocation_id": allocation_id, "reads": reads}
        return _wait(record, verify_delay(reads), {**scratch, "verify": verify})

    def _still_there(self, address: Address) -> bool:
        """Whether EC2 still has the launch's own address, shown once, that AssociateAddress answered does not
        exist for a minute: looked at by its allocation id before it is taken for released. EC2's reads are not
        monotonic (one of several replicas answers each, a later one further behind than an earlier one), and its
        lag may outlast those tries: one look that finds it is EC2 having it, its association to be tried again,
        never another address allocated. Looked at twice, as one replica behind answers NotFound for an address
        another has; both answering so is its release (the sweeper's, an operator's)."""
        for _ in range(2):
            if self._current(address.allocation_id) is not None:
                log.info(
                    "address %s, refused as unknown, is shown by EC2: its association is tried again shortly",
                    address.public_ip,
                )
                return True
        return False

    def _current(self, allocation_id: str) -> Address | None:
        try:
            return self._addresses.describe(allocation_id)
        except AddressNotFound:
            return None

    def _instance_unavailable(
        self, record: LifecycleRecord, now: datetime, scratch: dict[str, Any]
    ) -> Outcome:
        """EC2 refused the instance; its state tells a pending instance (wait) from a gone one (its launch ends).

        Gone (terminated while its address was being assigned: a scale-in right after the scale-out, a Spot
        instance reclaimed), its launch action went with it: the launch ends as ``instance-gone``, as one that
        waited for an address does (``_instance_gone``), the addresses allocated for it released (a pool's stay
        in the pool, unassociated). No EIP failure: no live instance is without its address.

        Pending, it is tried again for two minutes (INSTANCE_ATTEMPTS), then the failure policy decides. One EC2
        does not list at all is neither: EC2 does not know a new instance yet (its reads lag RunInstances, for
        minutes at worst), and failing it at two minutes would count an EIP failure (the alarm) and apply the
        policy to a live instance (abandon: terminated). It is tried on, UNKNOWN_INSTANCE_DELAY apart, for as long
        as the launch may wait for an address (EipWaitSeconds, two minutes at least); each of those tries asks Auto
        Scaling too (one DescribeAutoScalingInstances, on that abnormal path only), as an instance its group
        terminates meanwhile took its launch action with it: the launch then ends as ``instance-gone``."""
        instance = record.instance_id
        state = self._addresses.instance_states([instance]).get(instance)
        if state in GONE_STATES:
            return self._gone_with_spares(record, state)
        attempts = int(scratch.get("instance_attempts", 0)) + 1
        since = scratch.get("instance_since") or now.isoformat()
        scratch = {**scratch, "instance_attempts": attempts, "instance_since": since}
        if attempts > INSTANCE_ATTEMPTS and state is None:
            going = self._terminating(record)
            if going is not None:
                return self._gone_with_spares(record, going)
            waited = now - datetime.fromisoformat(since)
            if waited < max(self._wait, timedelta(seconds=INSTANCE_ATTEMPTS * INSTANCE_DELAY)):
                log.info("instance %s is still unknown to EC2: trying again shortly", instance)
                return _wait(record, UNKNOWN_INSTANCE_DELAY, scratch)
            return self._fail(
                record,
                f"instance still unknown to EC2 {waited.total_seconds():.0f} s after its first refusal",
            )
        if attempts > INSTANCE_ATTEMPTS:
            waited_s = INSTANCE_ATTEMPTS * INSTANCE_DELAY
            return self._fail(
                record, f"instance could not take an address for {waited_s}s (state {state or 'unknown'})"
            )
        log.info(
            "instance %s cannot take an address yet (state %s): trying again shortly",
            instance,
            state or "not visible yet",
        )
        return _wait(record, INSTANCE_DELAY, scratch)

    # -- endings ---------------------------------------------------------------------------------------

    def _done(self, record: LifecycleRecord, address: Address, found: list[Address] | None) -> Outcome:
        if self._mode is EipMode.ALLOCATE:
            released = self._release_spares(record, keep=address.allocation_id, found=found)
        else:
            released = 0
        self._leave_line(record, record.updated_at, holding=True, released=released)
        self._hold(record, address)
        log.info(
            "instance %s has Elastic IP %s",
            record.instance_id,
            address.public_ip,
            extra={"allocation_id": address.allocation_id},
        )
        return Outcome.next(
            allocation_id=address.allocation_id, public_ip=address.public_ip, extra=without_scratch(record)
        )

    def _hold(self, record: LifecycleRecord, address: Address) -> None:
        """Keep the pool address the instance holds now for its release (``AddressLines.held``): EC2's reads may
        not show the association to the release for minutes, and a stopped instance keeps what its release does
        not find. One write; lost (throttled, refused), the release finds the address by its listings alone."""
        if (
            address.pool is None
            or address.association_id is None
            or address.instance_id != record.instance_id
        ):
            return
        held = Held(
            allocation_id=address.allocation_id,
            association_id=address.association_id,
            public_ip=address.public_ip,
            pool=address.pool,
            at=record.updated_at,
        )
        try:
            self._lines.hold(self._owner, record.instance_id, held)
        except TransientError as error:
            log.warning("could not keep address %s for the instance's release: %s", address.public_ip, error)

    def _release_spares(self, record: LifecycleRecord, keep: str | None, found: list[Address] | None) -> int:
        """Release the unassociated addresses allocated for this instance other than ``keep``.

        They are what concurrent deliveries (or a launch that failed) left: one instance, one address. Each
        is looked at again right before its release, so one that got associated meanwhile is left alone. One
        that EC2 refuses to release is left, tagged, to the sweeper (whose failures an alarm reports): the
        instance holds its own address, and a spare is no reason to fail its launch. Returns how many were
        released: room under the quota, which the launches waiting for it are woken for (``_leave_line``).
        """
        listing = (
            found
            if found is not None
            else self._addresses.find(self._owner, allocated_for=record.instance_id)
        )
        released = 0
        for address in listing:
            spare = (
                address.allocation_id != keep
                and not address.associated
                and address.pool is None
                and address.allocated_for == record.instance_id
            )
            if not spare:
                continue
            try:
                gone = release_unassociated(self._addresses, address.allocation_id)
            except AddressInUse:
                log.info("spare address %s got associated meanwhile: left alone", address.public_ip)
                continue
            except AddressRefused as error:
                self._metrics.count("EipFailures")
                log.error(
                    "EC2 refused to release spare address %s: %s; left to the sweeper",
                    address.public_ip,
                    error,
                )
                continue
            if gone:
                released += 1
                self._metrics.count("EipsReleased")
                log.info("released spare address %s of instance %s", address.public_ip, record.instance_id)
        return released

    def _start_over(
        self, record: LifecycleRecord, scratch: dict[str, Any], reason: str, *, failed: bool = False
    ) -> Outcome:
        """Assign an address again (``failed``: an address was taken away from the launch, an EIP failure), unless
        the instance is going. An assignment that did not hold may be one whose instance a user or its group
        terminated meanwhile: EC2 ended its association, or the terminate's release (terminate hooks holding the
        instance running) took the address back before EC2's reads showed the association. Started over, such a
        launch would count an EIP failure for an instance going (the alarm) and take another address for it, an
        allocated one left on it until EC2 terminates it (then the sweeper's), or a pool's kept from the live
        launches. It ends as ``instance-gone`` instead, as a launch that waited for an address does. Two reads
        (DescribeInstances, DescribeAutoScalingInstances), at a start over only."""
        going = self._going(record)
        if going is not None:
            return self._gone_with_spares(record, going)
        if failed:
            self._metrics.count("EipFailures")
        restarts = int(scratch.get("restarts", 0)) + 1
        if restarts > MAX_RESTARTS:
            return self._fail(record, f"{reason} (gave up after {MAX_RESTARTS} attempts)")
        log.warning("%s: assigning an address again", reason)
        # (a wait for an address given back goes on where it was: EipWaitSeconds bound the wait in all, and
        # the launch keeps its place in the pool's line)
        kept: dict[str, Any] = {
            key: scratch[key]
            for key in ("exhausted_since", "exhausted", "refused_addresses")
            if key in scratch
        }
        return _wait(record, VERIFY_DELAY, {**kept, "restarts": restarts})

    def _exhausted(
        self,
        record: LifecycleRecord,
        scratch: dict[str, Any],
        now: datetime,
        reason: str,
        *,
        line: Line | None = None,
        ahead: int,
        listed: list[Address] | None = None,
    ) -> Outcome:
        """No address to be had now: the pool is empty, or the account's quota is used up. Another lifecycle
        may be about to give one back: an instance refresh launches each replacement while the instance it
        replaces drains, and that one's address goes back to the pool (or is released) once its drain is over.
        Failed at once, a pool sized to the fleet would abandon every replacement of a refresh (the group
        launching another, and another) until the drains end. So it is looked for again for ``EipWaitSeconds``
        from the first time it was missing, in all (a start over of the assignment does not start it again);
        then the failure policy decides. The launch waits in the pool's line meanwhile (in allocate mode, the
        quota's), so the addresses given back go to the launches waiting longest (see
        :mod:`nodecycle.domain.eip.line`).

        ``listed``: the pool as this look listed it. A launch that has just joined the line may have listed it
        before an address came back, and the release that gave it back may have read the line, to wake its first
        waiter, before this launch joined it: no one was woken. So it lists the pool again once in line (one
        DescribeAddresses per launch that starts waiting), and looks again at once when an address is free that
        was not: its look then decides, in the line's order."""
        since = scratch.get("exhausted_since")
        started = datetime.fromisoformat(since) if since else now
        waited = now - started
        if waited >= self._wait:
            return self._fail(record, reason if not since else f"{reason} ({waited.total_seconds():.0f} s)")
        # in line from the first time it found the pool empty (a join repeated keeps that place, so one that
        # fails here, the line's writes racing, is made again at the next look, in the same place)
        joined = False
        try:
            waiter = Waiter(started, record.id, record.instance_id, started + self._wait)
            joined = self._line.join(waiter, now, line)
        except TransientError as error:
            log.warning("could not join the line of pool %r (joins at the next look): %s", self._pool, error)
        looks = int(scratch.get("exhausted", 0))
        backoff = FIRST_IN_LINE_DELAY if ahead == 0 else EXHAUSTED_DELAY * 2**looks
        if joined and listed is not None and self._given_back_since(listed):
            backoff = 1
        delay = min(backoff, EXHAUSTED_DELAY_MAX, (self._wait - waited).total_seconds())
        log.warning(
            "no Elastic IP for instance %s yet: %s; looking again in %.0f s (%.0f s of %.0f s waited for one "
            "to be given back)",
            record.instance_id,
            reason,
            delay,
            waited.total_seconds(),
            self._wait.total_seconds(),
        )
        scratch = {**scratch, "exhausted_since": started.isoformat(), "exhausted": looks + 1}
        return Outcome.wait(max(1.0, delay), extra={**record.extra, SCRATCH: scratch})

    def _given_back_since(self, listed: list[Address]) -> bool:
        """Whether an address of the pool is free now that was not in ``listed``. Not knowing (EC2 throttling,
        refusing) is no reason to fail the look: it waits as before."""
        before = {address.allocation_id for address in listed if not address.associated}
        try:
            found = self._addresses.find(self._owner, pool=self._pool)
        except (AddressRefused, TransientError) as error:
            log.info("could not list pool %r again after joining its line: %s", self._pool, error)
            return False
        fresh = [a for a in found if not a.associated and a.allocation_id not in before]
        if fresh:
            log.info(
                "address %s came back to pool %r as this launch joined its line: looking again at once",
                fresh[0].public_ip,
                self._pool,
            )
        return bool(fresh)

    def _fail(self, record: LifecycleRecord, reason: str) -> Outcome:
        self._metrics.count("EipFailures")
        self._leave_line(record, record.updated_at, holding=False)
        extra = without_scratch(record)
        if self._abandon:
            log.error(
                "no Elastic IP for instance %s: %s; abandoning the launch (the group replaces the instance)",
                record.instance_id,
                reason,
            )
            return Outcome.goto(
                Step.COMPLETE, result=ActionResult.ABANDON, outcome=f"eip-failed: {reason}", extra=extra
            )
        log.error(
            "no Elastic IP for instance %s: %s; the launch goes on without an address (policy continue)",
            record.instance_id,
            reason,
        )
        return Outcome.next(outcome=f"eip-failed: {reason}; continued without an address", extra=extra)

    def _tags(self, record: LifecycleRecord, now: datetime) -> dict[str, str]:
        return {
            OWNER_TAG: self._owner,
            INSTANCE_TAG: record.instance_id,
            GROUP_TAG: record.group,
            ALLOCATED_AT_TAG: now.isoformat(timespec="seconds"),
        }


class _RefusedAddress(AddressRefused):
    """EC2 refused to associate these addresses of a pool (not another call): the next free one is tried."""

    def __init__(self, message: str, allocation_ids: list[str]) -> None:
        super().__init__(message)
        self.allocation_ids = allocation_ids
        self.untried = 0  # (the candidates of the look it ended, never refused, left untried)


def _refused(scratch: dict[str, Any]) -> list[str]:
    """The pool addresses EC2 refused to associate with the instance at its earlier looks."""
    return list(scratch.get("refused_addresses") or [])


def _held(found: Iterable[Address], instance: str) -> Address | None:
    """The address associated with the instance (the lowest allocation id, should there be several)."""
    held = sorted((a for a in found if a.instance_id == instance), key=lambda a: a.allocation_id)
    return held[0] if held else None


def _unassociated(found: Iterable[Address], now: datetime) -> list[Address]:
    """Free addresses that are no pool's, lowest allocation id first: the order concurrent runs agree on; but none
    allocated by nodecycle longer than TAKE_OWN_WITHIN ago, the sweeper's to release."""
    return sorted(
        (a for a in found if not a.associated and a.pool is None and not _the_sweepers(a, now)),
        key=lambda a: a.allocation_id,
    )


def _the_sweepers(address: Address, now: datetime) -> bool:
    allocated_at = address.allocated_at
    return allocated_at is not None and now - allocated_at >= TAKE_OWN_WITHIN


def _allocated(scratch: dict[str, Any], address: Address) -> dict[str, Any]:
    """The scratch, remembering ``address`` as allocated by this launch (see ``AssignAddress._with_allocated``)."""
    allocated = {
        "allocation_id": address.allocation_id,
        "public_ip": address.public_ip,
        "tags": dict(address.tags),
    }
    return {**scratch, "allocated": allocated}


def _seen(scratch: dict[str, Any], known: Iterable[Address]) -> dict[str, Any]:
    """The scratch, its own allocation marked known to EC2 when ``known`` (listed by EC2, or taken or refused by
    it) has it: from then on, EC2 answering that it does not exist is its release, not EC2 not knowing it yet."""
    allocated = scratch.get("allocated")
    if allocated is None or allocated.get("seen"):
        return scratch
    if not any(address.allocation_id == allocated["allocation_id"] for address in known):
        return scratch
    return {**scratch, "allocated": {**allocated, "seen": True}}


def verify_delay(reads: int) -> float:
    """The wait after the ``reads``-th read (or try) that EC2 did not show what was just written: VERIFY_DELAY,
    then twice as long each time, up to VERIFY_DELAY_MAX (EC2's reads lag its writes by seconds under load)."""
    return float(min(VERIFY_DELAY * 2 ** max(reads - 1, 0), VERIFY_DELAY_MAX))


def _wait(record: LifecycleRecord, delay: float, scratch: dict[str, Any]) -> Outcome:
    return Outcome.wait(delay, extra={**record.extra, SCRATCH: scratch})


def _since(scratch: dict[str, Any], now: datetime) -> datetime:
    """Since when the launch waits for an address to be given back: since ``now`` for one that has not yet."""
    since = scratch.get("exhausted_since")
    return datetime.fromisoformat(since) if since else now


def _draw(instance: str, allocation_id: str) -> str:
    """The place of a pool address in the instance's order: a hash, the same in every container."""
    return hashlib.sha256(f"{instance}/{allocation_id}".encode()).hexdigest()
