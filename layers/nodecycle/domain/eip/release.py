"""RELEASE_EIP: after the drain, take back this owner's addresses from the terminating instance.

The tags decide, not the current mode: a pool address is disassociated (back to its pool), never released;
an address allocated for this instance is disassociated and released; an address associated with another
instance is never touched, whatever its tags say (a pool address claimed again after this instance lost
it); an address of another owner is never even listed; one tagged with this owner by hand (no allocation time,
in no pool), or retired from its pool by hand (its pool tag removed, its allocation into a pool said by its own tag),
is left where it is, as the sweeper leaves it.

A lifecycle without a hook (an instance stopped outside the group's hooks) has no action for Auto Scaling to
confirm, and its message may run long after the stop (EventBridge retries an event for hours, a queue can
stall), when the instance runs again (out of a warm pool, or simply started): EC2 itself says whether the
instance is still down, and an address nodecycle allocated after the stop belongs to a later launch. So
does one allocated after the completion, for a release that runs after it (an action completed near its
global timeout: see :func:`nodecycle.domain.flow.completed_first`).

EC2 shows a start late, its LaunchTime with its state: a run of such a release seconds after the instance was
started again sees it down, launched before, and disassociates the address the instance holds in service (a
stopped instance keeps its addresses). No read closes that window, so such a release settles over two runs: the
first looks at the instance (twice: the look that shows a start is believed) and leaves the addresses allocated for
it where they are (disassociated, they would lie free and allocated long ago between the runs: what the sweeper
releases); only a later run, RELEASE_DELAY on, whose own look still finds the instance down, disassociates and
releases them (an instance shown shutting down or terminated is gone: no read shows a termination that did not
happen, and its addresses go at once). The addresses a run took back are kept in the record, and a later run that
sees the start gives back those allocated for the instance (associates them again, without a read first: one of a replica behind shows them still associated;
AllowReassociation=False moves none; a pool's address returned is claimed again by the instance's launch through
its line).

EC2's reads are not monotonic either (one of several replicas answers each): a listing of a replica behind may not
show the association the launch saw, and a pool's address (tagged for no instance) is found by that listing alone,
so one that shows nothing on the instance is asked once more. A DisassociateAddress answered as unknown while a read
still shows the address on the instance is an association EC2's writes do not know yet (made moments ago): the
address is kept in the record and disassociated again at a later run, not counted returned while it is there (on a
warm-pool stop EC2 leaves it on the instance).

What EC2 keeps in use past the step's attempts is left to the sweeper, which releases an address once EC2 shows it
unassociated and frees those of gone instances; but an instance going into its warm pool keeps, once stopped, what is
still on it, out of the sweeper's reach: its release keeps trying while the action is open (the engine's guard
completes the action before its global timeout, and the release then follows the completion). A refusal does not
hold the action: no wait changes a denial. Nor can it take back what no listing shows: a pool's address claimed
minutes before, EC2's reads behind the claim. So a launch keeps, beside its line, the pool address it left its
instance holding (AddressLines.held: one write per pool launch, read consistently by that instance's release into a
warm pool), and the release disassociates that association when no listing shows it, asking again while EC2's
writes do not know it yet (within HELD_FOR of the claim).
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from nodecycle.domain.eip import SCRATCH, release_unassociated, without_scratch
from nodecycle.domain.eip.line import AddressLines
from nodecycle.domain.eip.locked import LockedReleases
from nodecycle.domain.eip.wake import LineWaker, Offer, offers_of
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import ADDRESSES_LEFT, WARM_POOL, LifecycleRecord, Transition
from nodecycle.domain.ports.addresses import (
    OWNER_TAG,
    POOL_TAG,
    Address,
    AddressAlreadyAssociated,
    AddressError,
    Addresses,
    AddressInUse,
    AddressLocked,
    AddressNotFound,
    AddressRefused,
    distinct,
)
from nodecycle.domain.ports.instances import GONE_STATES, up
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

RELEASE_DELAY = 3  # seconds: EC2 refuses to release an address until its disassociation has settled
# ...and the waits after the first are twice as long each time, up to this: EC2's lag (seconds under load) may
# hold an address on the instance twice over, its writes not knowing an association made seconds ago (the launch's
# read saw it at once), then its reads not showing the disassociation; ten waits of 3 s would leave it to the
# sweeper under a lag of 20 s
RELEASE_DELAY_MAX = 30  # seconds
# A late release looks at the instance this many times per run: EC2's reads are not monotonic, and the look that
# keeps the address of an instance started again is the one that shows the start
LOOKS = 2
# A DisassociateAddress of the association a launch claimed (AddressLines.held) answered as unknown within this of
# the claim is taken for one EC2's writes do not know yet; later, for one ended since
HELD_FOR = timedelta(minutes=15)
RELEASE_ATTEMPTS = 10  # then the sweeper releases what is left, once EC2 shows it unassociated (see holding)
# ...but at a terminate, an address EC2 refuses to take back (a denial: a service control policy; the refusal
# DisassociateAddress documents for the only public IPv4 address of an interface with a public hostname) is asked
# again only once, RELEASE_DELAY later (a denial that was a blip): no wait changes a refusal, and the step runs before
# the completion and the cleanup, the drained node holding its budget slot meanwhile (invariant 10; its ten attempts
# kept the slot 195 s). Left on the instance, the address is disassociated by EC2 at the termination and released by
# the sweeper. (An instance going into its warm pool, or stopped outside the hooks, keeps what is left on it, out of
# the sweeper's reach: its refusals have the ten attempts.)
REFUSED_ATTEMPTS = 2


class ReleaseAddresses:
    def __init__(
        self,
        *,
        owner: str,
        addresses: Addresses,
        metrics: Metrics,
        waker: LineWaker | None = None,
        lines: AddressLines | None = None,
        locked: LockedReleases | None = None,
    ) -> None:
        self._owner = owner
        # Remembers the addresses AWS locked, for the sweep to try at a growing interval (None: told at each meeting)
        self._locked = locked
        # Where a launch keeps the pool address it left its instance holding (None: the listings alone)
        self._lines = lines
        self._addresses = addresses
        self._metrics = metrics
        # Wakes the first launch waiting for an address given back (see nodecycle.domain.eip.wake); None: the
        # waiters find it at their own looks
        self._waker = waker

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        instance = record.instance_id
        hookless = not record.transition.has_hook
        freed: Counter[str | None] = Counter()  # addresses given back, by pool (None: released)
        # The pool addresses this run disassociated and returned: each offered to the waiter woken for it, whose
        # look may list the pool before EC2's reads show the disassociation (see nodecycle.domain.eip.wake)
        offered: list[Offer] = []
        scratch: dict[str, Any] = dict(record.extra.get(SCRATCH) or {})
        # Pool addresses whose disassociation went unanswered at an earlier run (allocation id: pool), and at this
        # one; and those of the earlier runs this one has counted
        returning: dict[str, str] = dict(scratch.get("returning") or {})
        unanswered: dict[str, str] = {}
        settled: set[str] = set()
        # Addresses an earlier run disassociated from the instance (allocation ids), given back if it turns out
        # to have been started again (EC2 showed it late)
        disassociated: list[str] = list(scratch.get("disassociated") or [])
        # Pool addresses an earlier run saw on the instance whose disassociation EC2 answered as unknown while a
        # read still showed them there (an association EC2's writes do not know yet): looked at again by id
        pending: dict[str, str] = dict(scratch.get("pending") or {})
        # A late release (see _later_launches_from) releases only at a run after the one that first looked at the
        # instance: its look may have been stale (EC2 shows a start late), and a release cannot be undone
        later = _later_launches_from(record, hookless)
        settling: list[Address] = []
        # The addresses EC2 refused to take back at this run (public IP: its refusal, as EC2 said it)
        refused: dict[str, str] = {}
        # Whether the pool address the instance's launch left it holding (AddressLines.held) was given back
        held_returned = bool(scratch.get("held_returned"))
        try:
            seen = self._look(record, hookless) if later is not None else None
            if seen == "again":
                self._give_back(disassociated, instance)
                return Outcome.next(extra=without_scratch(record))
            # (an instance shown gone is gone: no read shows a termination that did not happen)
            may_release = seen in (None, "gone") or bool(scratch.get("looked"))
            # Associated with the instance (either mode), or allocated for it: an instance that terminated
            # before its drain finished has lost its association already, not its address.
            on_it = self._addresses.find(self._owner, instance_id=instance)
            if not any(address.instance_id == instance for address in on_it):
                # One listing showing nothing on the instance is one replica's answer: EC2's reads are not
                # monotonic, and a replica behind may not show the association the launch saw (a pool's address,
                # tagged for no instance, is found by it alone). Looked at once more before it is believed
                on_it = self._addresses.find(self._owner, instance_id=instance)
            found = distinct(on_it, self._addresses.find(self._owner, allocated_for=instance))
            found = self._still_pending(pending, found, instance, freed)
            if returning:
                self._returned_unanswered(returning, found, freed, settled, instance)
            taken_back: list[Address] = []
            in_use: list[Address] = []
            locked: list[Address] = []  # (AWS locked them: no wait releases them)
            if record.destination == WARM_POOL and not held_returned:
                unknown, held_returned, held_refusal = self._take_back_held(
                    record, found, now, freed, offered
                )
                in_use.extend(unknown)
                if held_refusal is not None:
                    refused.update({address.public_ip: held_refusal for address in unknown})
            for address in found:
                if address.associated and address.instance_id != instance:
                    log.info(
                        "address %s is associated with %s now: not this instance's to give back",
                        address.public_ip,
                        address.instance_id or "a network interface",
                    )
                    continue
                if address.by_hand:
                    # Not nodecycle's to take back, as the sweeper judges it too: a stopped instance keeps it for
                    # its next start
                    log.warning(
                        "address %s carries this owner's tag but is not nodecycle's to take back (no allocation "
                        "time, or retired from its pool by hand): left",
                        address.public_ip,
                    )
                    continue
                if later is not None and _since(address, later[1]):
                    log.info(
                        "address %s was allocated at %s, after the %s at %s: a later launch's, kept",
                        address.public_ip,
                        address.allocated_at,
                        *later,
                    )
                    continue
                taken_back.append(address)
                # (a pool's address, returned, is the pool's: a launch claims it through the pool's line)
                mine = address.pool is None and address.allocated_for == instance
                if mine and not may_release:
                    # Left on the instance until the next run, whose look at the instance decides: released then
                    # if it still finds the instance down, kept otherwise. Disassociated now, the address would
                    # lie unassociated and allocated long ago between the two runs, which is what the sweeper
                    # releases (its rule knows only a launch's seconds before its association): a sweep between
                    # them released the address the second run would have given back to an instance in service.
                    settling.append(address)
                    continue
                if mine and address.associated and address.allocation_id not in disassociated:
                    disassociated.append(address.allocation_id)
                try:
                    if not self._take_back(
                        address, instance, freed, unanswered, pending, offered=offered, now=now
                    ):
                        in_use.append(address)
                except AddressLocked as error:
                    # Asked again, it would hold the lifecycle (a terminate's action) minutes for nothing: left to
                    # the sweeper at once, disassociated, and told once (an operator has AWS Support unlock it;
                    # the sweep tries it again at a growing interval, told no more)
                    if self._tell_locked(address, now, error):
                        # (the lock's memory told it: an ERROR the first time, a WARNING with its next try after)
                        log.info("address %s is locked by AWS: left to the sweeper", address.public_ip)
                    else:
                        log.error(
                            "address %s is locked by AWS: %s; left to the sweeper", address.public_ip, error
                        )
                    locked.append(address)
                except AddressRefused as error:
                    # asked again once (REFUSED_ATTEMPTS), then left to the termination and the sweeper; the
                    # instance's other addresses are taken back meanwhile
                    log.warning("EC2 refused to take back address %s: %s", address.public_ip, error)
                    in_use.append(address)
                    refused[address.public_ip] = str(error)
        except TransientError as error:
            self._metrics.count("EipFailures")
            remaining = {**{a: p for a, p in returning.items() if a not in settled}, **unanswered}
            if remaining != returning:
                # What this run learned is kept for the next (a retry of the engine's keeps the record as it
                # was): a pool address disassociated, its answer lost, is not listed on the instance any more,
                # and would be neither counted returned nor woken for; one counted here is not counted again
                log.warning(
                    "EC2 did not answer (throttled or unavailable); the step runs again in %d s, looking at "
                    "the pool addresses whose disassociation went unanswered: %s",
                    RELEASE_DELAY,
                    error,
                )
                return Outcome.wait(
                    RELEASE_DELAY,
                    extra={
                        **record.extra,
                        SCRATCH: {
                            **scratch,
                            "returning": remaining,
                            "disassociated": disassociated,
                            "pending": pending,
                            "held_returned": held_returned,
                        },
                    },
                )
            log.warning(
                "EC2 did not answer (throttled or unavailable); the step retries with backoff: %s", error
            )
            raise
        except AddressRefused as error:
            # Not even allowed to list them: the lifecycle goes on, and the addresses are left to the sweeper
            # (whose own failures an alarm reports).
            self._metrics.count("EipFailures")
            log.error("EC2 refused to list the addresses of %s: %s; left to the sweeper", instance, error)
            return Outcome.next(extra={**without_scratch(record), ADDRESSES_LEFT: True})
        finally:
            if self._waker is not None and freed:
                self._waker.given_back(freed, now, offered=offered)
        if settling and not in_use:
            log.info(
                "addresses %s left on %s until the next run: released then if the instance is still down",
                ", ".join(address.public_ip for address in settling),
                instance,
            )
            return Outcome.wait(
                RELEASE_DELAY,
                extra={
                    **record.extra,
                    SCRATCH: {
                        **scratch,
                        "looked": True,
                        "disassociated": disassociated,
                        "pending": pending,
                        "held_returned": held_returned,
                    },
                },
            )
        if in_use:
            earlier: dict[str, Any] = record.extra.get(SCRATCH) or {}
            attempts = int(earlier.get("release_attempts", 0)) + 1
            refusals = int(earlier.get("refusals", 0)) + bool(refused)
            # An instance going into its warm pool keeps what is left on it once stopped, out of the sweeper's
            # reach (it takes addresses only from gone instances): tried again for as long as the action is open
            # (the engine's guard completes it before its global timeout; the release then follows the
            # completion, with the attempts left). A refusal is not: no wait changes a denial, and the action
            # would be held for hours
            holding = record.action_open and record.destination == WARM_POOL and not refused
            # (an address EC2 still shows in use is worth the waits; one it refuses at a terminate, REFUSED_ATTEMPTS
            # runs: EC2 disassociates it at the termination)
            settles = any(address.public_ip not in refused for address in in_use)
            terminates = record.transition is Transition.TERMINATING and record.destination != WARM_POOL
            given_up = terminates and not settles and refusals >= REFUSED_ATTEMPTS
            if (attempts < RELEASE_ATTEMPTS and not given_up) or holding:
                log.info("EC2 does not show the disassociation yet, or refused: releasing again shortly")
                return Outcome.wait(
                    min(RELEASE_DELAY * 2 ** min(attempts - 1, 4), RELEASE_DELAY_MAX),
                    extra={
                        **record.extra,
                        SCRATCH: {
                            "release_attempts": attempts,
                            "refusals": refusals,
                            "disassociated": disassociated,
                            "pending": pending,
                            "looked": True,
                            "held_returned": held_returned,
                        },
                    },
                )
            self._metrics.count("EipFailures")
            if refused:
                log.error(
                    "EC2 refused to take back %s (asked %d times): left where it is (EC2 disassociates a terminated "
                    "instance's addresses; the sweeper releases them)",
                    "; ".join(f"address {ip}: {why}" for ip, why in refused.items()),
                    refusals,
                )
            if settles:
                log.error(
                    "addresses %s are still in use after %d attempts: left to the sweeper",
                    ", ".join(address.public_ip for address in in_use if address.public_ip not in refused),
                    attempts,
                )
        extra = without_scratch(record)
        if in_use or locked:
            extra[ADDRESSES_LEFT] = True
        if not taken_back:
            return Outcome.next(extra=extra)
        first = taken_back[0]
        return Outcome.next(allocation_id=first.allocation_id, public_ip=first.public_ip, extra=extra)

    def _take_back_held(
        self,
        record: LifecycleRecord,
        found: list[Address],
        now: datetime,
        freed: Counter[str | None],
        offered: list[Offer],
    ) -> tuple[list[Address], bool, str | None]:
        """Disassociate the pool address the instance's launch left it holding (``AddressLines.held``) when no
        listing found it: EC2's reads may not show a claim of minutes ago, and an instance going into its warm
        pool keeps, once stopped, what its release does not take. Its association is the launch's own (the launch
        saw it): one EC2 answers as unknown within ``HELD_FOR`` of the claim is one its writes do not know yet,
        asked again (the address returned: in use); later, one ended meanwhile (by hand). Whether it was returned,
        and EC2's refusal (None: none). Returned, it is offered (``offered``) as the others are: the woken look's listing
        may still show the claim."""
        if self._lines is None:
            return [], False, None
        held = self._lines.held(self._owner, record.instance_id)
        if (
            held is None
            or now - held.at > HELD_FOR
            or any(a.allocation_id == held.allocation_id for a in found)
        ):
            return [], False, None
        address = Address(
            allocation_id=held.allocation_id,
            public_ip=held.public_ip,
            association_id=held.association_id,
            instance_id=record.instance_id,
            tags={OWNER_TAG: self._owner, POOL_TAG: held.pool},
        )
        try:
            disassociated = self._addresses.disassociate(held.association_id)
        except AddressRefused as error:
            log.warning("EC2 refused to take back address %s: %s", held.public_ip, error)
            return [address], False, str(error)
        if not disassociated:
            log.info(
                "address %s, claimed by the instance's launch at %s, is not known to EC2's writes yet, nor shown by "
                "its reads: disassociated again shortly",
                held.public_ip,
                held.at,
            )
            return [address], False, None
        self._metrics.count("EipsReturned")
        log.info(
            "returned address %s to pool %r (the launch's claim, not listed yet)", held.public_ip, held.pool
        )
        freed[held.pool] += 1
        offered.extend(offers_of([address], now))
        return [], True, None

    def _give_back(self, disassociated: list[str], instance: str) -> None:
        """Associate again with ``instance`` (up again, or started since the completion) the addresses an earlier
        run of this release disassociated from it, EC2's reads not showing the start yet, and still free: never
        moved from where they are (a launch that claimed one since keeps it)."""
        # (no read first: one of a replica behind shows the address still on the instance, before its
        # disassociation, and would keep it from going back; AllowReassociation=False never moves it)
        for allocation_id in disassociated:
            try:
                self._addresses.associate(allocation_id, instance)
            except AddressAlreadyAssociated:
                log.info(
                    "address %s taken back from %s is associated again: left where it is",
                    allocation_id,
                    instance,
                )
                continue
            except AddressNotFound:
                log.warning("address %s taken back from %s is gone: not given back", allocation_id, instance)
                continue
            except AddressError as error:  # the instance not up, refused
                log.warning("address %s not given back to %s: %s", allocation_id, instance, error)
                continue
            log.info(
                "address %s, taken back before EC2 showed instance %s started again, given back to it",
                allocation_id,
                instance,
            )

    def _disassociate(self, address: Address) -> None:
        if address.association_id is not None and not self._addresses.disassociate(address.association_id):
            log.info("address %s was disassociated already", address.public_ip)

    def _look(self, record: LifecycleRecord, hookless: bool) -> str:
        """How a late release finds its instance: ``again`` (in service again: its addresses are kept), ``gone``
        (shutting down or terminated), or ``down`` (stopped, or not shown started again yet). Up to two
        answers: EC2's reads are not monotonic, and the one that shows a start is believed (no replica shows a
        start that did not happen, nor a termination; one behind shows neither yet)."""
        gone = False
        for _ in range(LOOKS):
            answer = self._addresses.launch_state(record.instance_id)
            if answer is None:
                continue  # not listed: a replica behind, or long terminated; down either way
            restarted = (
                self._up_again_by(record, answer)
                if hookless
                else record.completed_at is not None
                and self._started_since(record, answer[1], record.completed_at)
            )
            if restarted:
                return "again"
            gone = gone or answer[0] in GONE_STATES
        return "gone" if gone else "down"

    def _up_again_by(self, record: LifecycleRecord, answer: tuple[str, datetime | None]) -> bool:
        """True when the instance of a lifecycle without a hook is not down (any more) by ``answer`` (its state
        and LaunchTime, of one DescribeInstances answer: from two, a fresh state beside a stale LaunchTime, EC2's
        reads not monotonic, would take an instance started again for one not shown stopped yet): a late
        message."""
        instance = record.instance_id
        state, launched = answer
        if not up(state):
            return False  # down, or gone (EC2 no longer lists it): its addresses are to be taken back
        if launched is not None and launched < record.started_at.replace(microsecond=0):
            # Not started since its stop (a start moves LaunchTime on): EC2's read lags the stop, which it shows
            # only seconds later under load, and the instance is down. (Both times have whole seconds: a start in
            # the stop's own second counts as one since, the address kept, as _since keeps one allocated then)
            log.info(
                "instance %s shows %s, launched at %s, before its stop at %s: EC2 does not show the stop yet; its "
                "addresses are taken back",
                instance,
                state,
                launched,
                record.started_at,
            )
            return False
        log.info(
            "instance %s is %s again since it stopped at %s: its addresses are kept (a late message)",
            instance,
            state,
            record.started_at,
        )
        return True

    def _started_since(
        self, record: LifecycleRecord, launched: datetime | None, completed_at: datetime
    ) -> bool:
        """True when the instance of a release after its action's completion (settled near its global timeout)
        was started again since that completion (``launched``: its LaunchTime): it went into its warm pool,
        stopped, and a scale out took it out again. Its new launch keeps the addresses it finds on it (or
        allocated for it): theirs, not this lifecycle's to take back from an instance in service. (An instance
        kept running in a Running pool is not started again: EC2 cannot tell that.)"""
        if launched is None or launched <= completed_at:
            return False
        log.info(
            "instance %s was started again at %s, after its action's completion at %s: its addresses are a "
            "later launch's, kept (a late release)",
            record.instance_id,
            launched,
            completed_at,
        )
        return True

    def _on(self, allocation_id: str, instance: str) -> Address | None:
        """The address, when one of two reads by its id shows it on ``instance`` (one replica behind may show it
        as it was before the association); None otherwise."""
        for _ in range(2):
            try:
                current = self._addresses.describe(allocation_id)
            except AddressNotFound:
                continue
            if current.instance_id == instance:
                return current
        return None

    def _still_pending(
        self, pending: dict[str, str], found: list[Address], instance: str, freed: Counter[str | None]
    ) -> list[Address]:
        """``found``, with the ``pending`` pool addresses a read still shows on the instance (taken back again);
        those two reads show off it are returned (disassociated since: a later attempt, or EC2's at a
        termination), counted so, and no longer pending; one gone (released by hand) was not returned."""
        listed = {address.allocation_id for address in found if address.instance_id == instance}
        kept = [a for a in found if a.allocation_id not in pending or a.instance_id == instance]
        for allocation_id, pool in list(pending.items()):
            if allocation_id in listed:
                continue
            shown = self._on(allocation_id, instance)
            if shown is not None:
                kept.append(shown)
                continue
            del pending[allocation_id]
            try:
                current = self._addresses.describe(allocation_id)
            except AddressNotFound:
                continue
            self._metrics.count("EipsReturned")
            if current.associated:
                log.info("returned address %s to pool %r (claimed since)", current.public_ip, pool)
                continue
            log.info("returned address %s to pool %r (off the instance now)", current.public_ip, pool)
            freed[pool] += 1
        return kept

    def _returned_unanswered(
        self,
        returning: dict[str, str],
        found: list[Address],
        freed: Counter[str | None],
        settled: set[str],
        instance: str,
    ) -> None:
        """Count as returned the pool addresses whose disassociation went unanswered at an earlier run (EC2 may
        have made it: a 5xx after it, read timeouts past botocore's retries) and that are off the instance now:
        free in their pool (``freed``: a launch in its line is woken for it) or claimed by a launch since. One
        still on the instance (listed, or read by its id where a replica behind listed nothing) is taken back as
        the others are (its disassociation did not land, or EC2 does not show it yet); one gone (released by hand)
        was not returned. ``settled``: those counted."""
        listed = {address.allocation_id for address in found}
        for allocation_id, pool in returning.items():
            if allocation_id in listed:
                settled.add(allocation_id)
                continue
            try:
                current = self._addresses.describe(allocation_id)
            except AddressNotFound:
                settled.add(allocation_id)
                continue
            settled.add(allocation_id)
            if current.instance_id == instance:
                # Still on the instance (the disassociation did not land), which the listing of a replica behind
                # did not show: taken back as the others are (appended to ``found``), not counted returned yet
                found.append(current)
                continue
            self._metrics.count("EipsReturned")
            if current.associated:
                log.info("returned address %s to pool %r (claimed since)", current.public_ip, pool)
                continue
            log.info(
                "returned address %s to pool %r (the disassociation's answer was lost)",
                current.public_ip,
                pool,
            )
            freed[pool] += 1

    def _tell_locked(self, address: Address, now: datetime, error: AddressLocked) -> bool:
        """Tell a lock met, once (remembered for the sweep: True, the memory logged it) or, where it cannot be
        remembered, as each one was before locks were remembered (False: the caller logs it): the memory is advice,
        and a table that throttles it (or whose item others keep writing) must not hold the lifecycle in retries
        for an address already left to the sweeper."""
        if self._locked is not None:
            try:
                self._locked.met(address, now, error)
                return True
            except TransientError as unremembered:
                log.warning(
                    "the lock of address %s could not be remembered (%s): told now, and again by the sweep",
                    address.public_ip,
                    unremembered,
                )
        self._metrics.count("EipFailures")
        return False

    def _take_back(
        self,
        address: Address,
        instance: str,
        freed: Counter[str | None],
        unanswered: dict[str, str],
        pending: dict[str, str],
        *,
        offered: list[Offer] | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Disassociate, then release or return the address; False when EC2 still has it in use. ``freed``
        counts what a launch waiting in a line may take now: an address returned to its pool, or released.
        ``unanswered``: the pool addresses whose disassociation went unanswered (raised a TransientError);
        ``pending``: those whose disassociation EC2 answered as unknown while it still shows them on the
        instance. ``offered``: the pool addresses returned, with the association ended (at ``now``), each offered
        to the waiter woken for it."""
        pending.pop(address.allocation_id, None)
        if address.association_id is not None:
            try:
                disassociated = self._addresses.disassociate(address.association_id)
            except TransientError:
                if address.pool is not None:
                    unanswered[address.allocation_id] = address.pool
                raise
            if not disassociated and address.pool is not None and self._on(address.allocation_id, instance):
                # EC2 answered the association unknown, and shows it on the instance: an association made
                # moments ago, which its writes do not know yet (the launch's read saw it first). Not returned
                # yet (on a warm-pool stop EC2 leaves it there): disassociated again shortly
                log.info(
                    "address %s is on instance %s, its association not known to EC2 yet: disassociated again "
                    "shortly",
                    address.public_ip,
                    instance,
                )
                pending[address.allocation_id] = address.pool
                return False
            if not disassociated:
                log.info("address %s was disassociated already", address.public_ip)
        if address.pool is not None:
            self._metrics.count("EipsReturned")
            log.info("returned address %s to pool %r", address.public_ip, address.pool)
            freed[address.pool] += 1
            if offered is not None and now is not None:
                offered.extend(offers_of([address], now))
            return True
        if address.allocated_for != instance:
            # Ours, but allocated for another instance: unassociated now, the sweeper judges it by its age.
            log.warning(
                "address %s was allocated for %s: disassociated only",
                address.public_ip,
                address.allocated_for,
            )
            return True
        try:
            released = release_unassociated(self._addresses, address.allocation_id)
        except AddressInUse:
            return False
        if released:
            self._metrics.count("EipsReleased")
            log.info("released address %s of instance %s", address.public_ip, instance)
            freed[None] += 1
        else:
            log.info("address %s was released already", address.public_ip)
        return True


def _later_launches_from(record: LifecycleRecord, hookless: bool) -> tuple[str, datetime] | None:
    """What happened to the instance, and when, from which on an address allocated for it is a later launch's
    rather than this lifecycle's: a lifecycle with no hook has no action to confirm (see the module
    docstring), from its stop; nor has a release after the completion (an action settled near its global
    timeout: :func:`nodecycle.domain.flow.completed_first`), whose message may come after the instance left
    its warm pool again, from the completion. None: every address of the instance is this lifecycle's."""
    if hookless:
        return "stop", record.started_at  # (before any completion of it: the earlier bound keeps more)
    if record.completed_at is not None:
        return "completion", record.completed_at
    return None


def _since(address: Address, moment: datetime) -> bool:
    """Allocated at or after ``moment``. The tag has whole seconds, so the stop's own second counts as after:
    an address kept by mistake stays with its instance; one released by mistake is lost to it."""
    allocated_at = address.allocated_at
    return allocated_at is not None and allocated_at >= moment.replace(microsecond=0)
