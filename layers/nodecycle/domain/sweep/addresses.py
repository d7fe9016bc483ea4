"""The sweeper's Elastic IP part: free what a crash, or an instance gone without its hook, left behind.

The rule, per address tagged ``nodecycle:owner=<this owner>`` (addresses of other owners are never listed):

- Associated with an instance that is gone (shutting-down or terminated; one EC2 does not list is left alone,
  a new instance not listed yet, as EC2 ends a gone instance's associations itself): disassociate it
  (that association id only, so a newer association is never undone). A pool address is then back in its
  pool and done with; any other address is judged by the next rule.
- Associated with a network interface that no instance holds and no AWS service manages (detached, not
  requester-managed), allocated for an instance that is gone: the interface outlived its instance
  (``DeleteOnTermination`` off) and would hold the address for ever; disassociated too, and judged as above. A pool
  address on such an interface is disassociated whatever instance it was allocated for: its tag names the
  instance that grew the pool, not the one that claimed it since, which may have gone without its release step
  (the one that grew the pool may live on for ever: the address would be lost to the pool).
- On the interface of a NAT gateway, a load balancer, any service's (requester-managed): that service's to
  disassociate (EC2 answers anyone else ``AuthFailure``, at every sweep); left alone.
- Associated otherwise (a live instance, another network interface): in use, left alone.
- A pool address: never released; free is where it belongs.
- Unassociated, allocated by nodecycle more than the sweep grace ago (``nodecycle:allocated-at``): released.
  An address is unassociated in two cases only: for the seconds between its AllocateAddress and
  AssociateAddress (the grace covers them, and a launch whose address the sweep did release allocates
  again), and after its instance went without RELEASE_EIP running (it should go at once). So its age
  since allocation is all the rule needs, and no ``unassociated-since`` tag (and no CreateTags permission
  beyond allocation) is needed: such an address lives at most one sweep period past the grace.
- Without ``nodecycle:allocated-at`` (and in no pool): not allocated by nodecycle; left alone, with a warning,
  whatever it is associated with (this rule comes first).

A launch never takes an address of its own allocated longer ago than ``TAKE_OWN_WITHIN`` (a redelivered launch
takes the address allocated for its instance only within it, a minute short of the least grace: see
:mod:`nodecycle.domain.eip.assign`), so a sweep and a launch never reach for the same address: EC2 has no
conditional release, and its reads lag its writes, so a description cannot tell an association made seconds
before (in a nondefault VPC EC2 refuses the release then; in a default VPC it disassociates and releases the
address without a word). Each address is still described again right before its release, and released only
if it is still unassociated: an address associated since the listing (by hand, a launch's long ago) is kept.

Cost: one DescribeAddresses (it has no pages: one call answers for every address of the owner) and one
batched DescribeInstances for the instances the addresses are associated with (or were allocated for, when
on an interface alone); when any is on an interface alone, one batched DescribeNetworkInterfaces for those
interfaces; then, per address released,
one DescribeAddresses by its allocation id; and, when it freed any, the wake-up of the first launches waiting
in their lines (:mod:`nodecycle.domain.eip.wake`: a line read, a record read and a message per waiter woken).

An address EC2 refuses to free for good (a denial, a service control policy's explicit deny, DisassociateAddress's
refusal for the only public IPv4 address of an interface with a public DNS name), or that AWS locked, is remembered
(:mod:`nodecycle.domain.eip.locked`): tried again at a growing interval, told when met (a refusal at each refused
try), and failing no sweep; tried at every sweep, it failed each one, every 5 minutes for ever.

Within the sweep's time (:mod:`.sweep_time`): hundreds of addresses to free (a refresh whose releases failed),
two or three calls each, throttled and retried, outlast the invocation; the runtime would end it mid-call.
So an address is started only while time is left, and the rest wait for the next sweep, which lists only what
is still there: what this one freed is gone from its listing.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodecycle.domain.eip import release_unassociated
from nodecycle.domain.eip.locked import LockedReleases
from nodecycle.domain.eip.wake import LineWaker, offers_of
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.ports.addresses import Address, Addresses, AddressInUse, AddressRefused
from nodecycle.domain.ports.instances import GONE_STATES
from nodecycle.domain.ports.runtime import Clock, Metrics
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import SweepFailed

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AddressSweepReport:
    released: int = 0  # unassociated past the grace (or on a gone instance): released
    returned: int = 0  # pool addresses taken back from gone instances
    kept: int = 0  # addresses of this owner left as they are


class AddressSweep:
    def __init__(
        self,
        *,
        owner: str,
        addresses: Addresses,
        clock: Clock,
        metrics: Metrics,
        grace: timedelta,
        waker: LineWaker | None = None,
        locked: LockedReleases | None = None,
    ) -> None:
        self._owner = owner
        self._addresses = addresses
        self._clock = clock
        self._metrics = metrics
        self._grace = grace
        self._waker = waker  # wakes the first launch waiting for what is freed (nodecycle.domain.eip.wake)
        # remembers the addresses AWS locked, tried at a growing interval (nodecycle.domain.eip.locked); None: at
        # every sweep, each refusal a failure
        self._locked = locked

    def __call__(self, time: SweepTime) -> AddressSweepReport:
        now = self._clock.now()
        try:
            found = self._addresses.find(self._owner)
        except AddressRefused as error:
            # The listing denied to the sweeper's role (the role narrowed, a service control policy) stops the part:
            # told as any part AWS refuses (the sweeper's one line and SweepPartsRefused), not as a bug's traceback
            cause = error.__cause__
            if isinstance(cause, AccessRefused):
                raise cause from cause.__cause__  # (AWS's own answer: the call, the code, its words)
            raise
        # the instances the addresses are on, and those an address left on a network interface was allocated
        # for (its instance may be gone, the interface outliving it)
        attached = {address.instance_id for address in found if address.instance_id} | {
            address.allocated_for for address in found if _on_an_interface(address) and address.allocated_for
        }
        states, unknown = self._states(attached)
        left, interfaces_unknown = self._left_behind(
            {a.interface_id for a in found if _on_an_interface(a) and a.interface_id and not a.by_hand}
        )
        released = returned = failed = unreached = 0
        freed_by: Counter[str | None] = Counter()  # by pool (None: released, room under the quota)
        to_pools: list[Address] = []  # (each offered to the launch woken for it: nodecycle.domain.eip.wake)
        for address in found:
            if unknown and address.associated:
                continue  # nothing says its instance is gone: in use, as far as this sweep can tell
            if not time.enough():
                unreached += 1
                continue
            try:
                freed = self._free(address, states, left, now)
            except (AddressRefused, _DisassociationRefused) as refusal:
                # One address EC2 will not let go (a denial on its tags, say) must not keep the others from being
                # freed: remembered and told, tried again at a growing interval (or, with no memory, counted and
                # the sweep failed once all were seen)
                if not self._remembered(address, now, refusal):
                    failed += 1
                continue
            except TransientError as error:
                # (throttled past the client's own retries: counted, and the sweep fails once all were seen)
                log.error("EC2 did not answer for address %s: %s", address.public_ip, error)
                failed += 1
                continue
            released += freed == "released"
            returned += freed == "returned"
            if freed is not None:
                freed_by[address.pool if freed == "returned" else None] += 1
            if freed == "returned":
                to_pools.append(address)
        if self._waker is not None and freed_by:
            self._waker.given_back(freed_by, now, offered=offers_of(to_pools, now))
        if released or returned:
            self._metrics.count("SweptEips", released + returned)
        report = AddressSweepReport(
            released=released, returned=returned, kept=len(found) - released - returned
        )
        log.info(
            "EIP sweep: %d released, %d returned to their pool, %d kept (%d not judged for want of time)",
            released,
            returned,
            report.kept,
            unreached,
        )
        if failed or unknown or interfaces_unknown:
            self._metrics.count("EipFailures", failed + int(unknown) + int(interfaces_unknown))
        if unreached:
            raise time.cut_short(
                f"{unreached} of {len(found)} addresses not judged, {failed} could not be freed"
            )
        if failed or unknown or interfaces_unknown:
            told = [f"EC2 refused to free {failed} addresses, or did not answer"] if failed else []
            if unknown:  # (the lookup alone may have failed: then no address was refused)
                told.append(
                    "EC2 did not tell the states of the addresses' instances: the associated ones not judged"
                )
            if interfaces_unknown:
                told.append(
                    "EC2 did not tell the addresses' network interfaces: those on an interface alone not judged"
                )
            raise SweepFailed("; ".join(told) + " (the others were swept)")
        return report

    def _states(self, instance_ids: set[str]) -> tuple[dict[str, str], bool]:
        """The states of the instances the addresses are on (or were allocated for); and True when EC2
        refused to tell them, or did not answer. The unassociated addresses need no state: a lookup EC2
        refuses (a denial) or throttles past the client's retries (DescribeInstances is an account's busiest
        call) must not keep them from being released, sweep after sweep."""
        if not instance_ids:
            return {}, False
        try:
            return self._addresses.instance_states(instance_ids), False
        except (AddressRefused, TransientError) as error:
            log.error("EC2 refused to describe the addresses' instances, or did not answer: %s", error)
            return {}, True

    def _left_behind(self, interface_ids: set[str]) -> tuple[set[str], bool]:
        """Those of the interfaces that no instance holds and no service manages (an instance left them behind);
        and True when EC2 refused to tell, or did not answer: then none is, and the addresses on them are kept
        (a NAT gateway's address must never be taken for a leftover's)."""
        if not interface_ids:
            return set(), False
        try:
            return self._addresses.left_behind(interface_ids), False
        except (AddressRefused, TransientError) as error:
            log.error(
                "EC2 refused to describe the addresses' network interfaces, or did not answer: %s", error
            )
            return set(), True

    def _free(self, address: Address, states: dict[str, str], left: set[str], now: datetime) -> str | None:
        """What became of one address: ``released``, ``returned`` (to its pool), or None (kept)."""
        if address.by_hand:
            # Neither released nor disassociated, even from a gone instance's interface that outlived it (a
            # static interface an operator moves on by hand)
            log.warning(
                "address %s carries this owner's tag but no valid allocation time: not nodecycle's, left alone",
                address.public_ip,
            )
            return None
        if address.association_id is not None:
            if not (
                _on_gone_instance(address, states) or self._left_on_an_interface(address, states, left, now)
            ):
                return None
            if self._locked is not None and self._locked.waits(address, now, address.association_id):
                return None  # (EC2 refused to end this association: tried again at its next try)
            # (False: the association ended since the listing, the terminate's own release step came first; a
            # pool address may be claimed again already: not this sweep's return)
            try:
                disassociated = self._addresses.disassociate(address.association_id)
            except AddressRefused as error:
                raise _DisassociationRefused(error, address.association_id) from error
            if disassociated:
                log.warning(
                    "address %s was still associated with %s, whose instance %s is gone: disassociated",
                    address.public_ip,
                    "it" if address.instance_id else "a network interface",
                    address.instance_id or address.allocated_for,
                )
            if address.pool is not None:
                return "returned" if disassociated else None
        if address.pool is None and self._expired(address, now) and self._release(address, now):
            return "released"
        return None

    def _remembered(
        self, address: Address, now: datetime, refusal: AddressRefused | _DisassociationRefused
    ) -> bool:
        """EC2 refused to free the address for good (a denial, a service control policy, the only public IPv4
        address of an interface with a public DNS name): remembered and told by ``LockedReleases.met``, tried again
        at a growing interval, rather than fail every sweep for ever; whether it was. False without a memory, or
        when it could not be written (the table throttled): then the refusal fails this sweep, as before."""
        error, association = (
            (refusal.error, refusal.association)
            if isinstance(refusal, _DisassociationRefused)
            else (refusal, None)
        )
        if self._locked is None:
            log.error("EC2 refused to free address %s: %s", address.public_ip, error)
            return False
        try:
            self._locked.met(address, now, error, association)
        except TransientError as unwritten:
            log.error(
                "EC2 refused to free address %s: %s; and the refusal could not be remembered: %s",
                address.public_ip,
                error,
                unwritten,
            )
            return False
        return True

    def _left_on_an_interface(
        self, address: Address, states: dict[str, str], left: set[str], now: datetime
    ) -> bool:
        """An address on a network interface left behind (no instance holds it, no service manages it), allocated
        for an instance that is gone: the interface outlived it (``DeleteOnTermination`` off), and would hold the
        address for ever. An instance EC2 no longer lists is gone too, once the address is older than the grace
        (a terminated one is listed for about an hour; a new one may not be listed yet). A pool address on such an
        interface whatever it was allocated for: its tag names the instance that grew the pool, not its claimer."""
        if not _on_an_interface(address) or address.interface_id not in left:
            return False
        if address.pool is not None:
            return True
        if address.allocated_for is None:
            return False
        state = states.get(address.allocated_for)
        return state in GONE_STATES or (state is None and self._expired(address, now))

    def _expired(self, address: Address, now: datetime) -> bool:
        allocated_at = address.allocated_at
        return allocated_at is not None and now - allocated_at >= self._grace

    def _release(self, address: Address, now: datetime) -> bool:
        """Release the address if EC2 shows it unassociated now (see ``release_unassociated``); whether this
        sweep released it (a ReleaseAddress that landed with its answer lost counts; one another caller
        released after the look does not), as for the eip function's releases."""
        try:
            released = (
                release_unassociated(self._addresses, address.allocation_id)
                if self._locked is None
                else self._locked.release(self._addresses, address, now)
            )
        except AddressInUse:
            # Associated since the listing (a launch took it back), or a disassociation not settled yet.
            log.info("address %s is in use: kept", address.public_ip)
            return False
        if released:
            log.warning(
                "released address %s: unassociated, allocated at %s for %s",
                address.public_ip,
                address.allocated_at,
                address.allocated_for or "no instance",
            )
        return released


class _DisassociationRefused(Exception):
    """EC2 refused to end the association (its id): remembered as a refusal of that association alone, which ends
    at the termination or by hand, the address then released or claimed again (not held back by the memory)."""

    def __init__(self, error: AddressRefused, association: str) -> None:
        super().__init__(str(error))
        self.error = error
        self.association = association


def _on_an_interface(address: Address) -> bool:
    return address.association_id is not None and address.instance_id is None


def _on_gone_instance(address: Address, states: dict[str, str]) -> bool:
    if address.instance_id is None:
        return False  # associated with a network interface, not an instance: not ours to judge
    # An instance DescribeInstances does not know (yet) is left alone: a new instance may not be listed for a
    # few seconds, while a terminated one stays listed as such, and EC2 itself frees its addresses later.
    state = states.get(address.instance_id)
    return state is not None and state in GONE_STATES
