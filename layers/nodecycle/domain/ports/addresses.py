"""Elastic IPs as the EIP steps see them: the tags nodecycle writes, one address, and the port to EC2."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

# The owner tag is the one a managed group carries: one name for "this stack's" everywhere.
from nodecycle.domain.catalog import OWNER_TAG as OWNER_TAG

# Set in AllocateAddress's TagSpecifications. AllocateAddress has no idempotency token, so these tags are the
# only way to find an address again after a crash: the instance tag is the idempotency key of a launch, and
# allocated-at is what the sweeper measures its grace from.
INSTANCE_TAG = "nodecycle:instance-id"
GROUP_TAG = "nodecycle:group"
ALLOCATED_AT_TAG = "nodecycle:allocated-at"
# An address of a pool (named by this tag's value) is claimed and returned, never released.
POOL_TAG = "nodecycle:pool"
# Written by nodecycle alone, at an allocation into a pool (one that may grow: its name): the address is a pool's for
# good, never an instance's to release, whatever its pool tag says later (an operator retiring it removes that one;
# it then carries the same tags as an address allocated for one instance).
ALLOCATED_INTO_TAG = "nodecycle:allocated-into"


class AddressError(Exception):
    """EC2 refused an address call for a reason the EIP steps decide about (not a transient one)."""


class AddressRefused(AddressError):
    """EC2 refused the call for a reason no retry changes: a denial (``UnauthorizedOperation``, a service
    control policy), a subnet without an internet gateway (``Gateway.NotAttached``), a parameter it rejects.
    The step's failure policy applies; the ``EipFailures`` alarm calls an operator to fix the account."""


class InstanceRefused(AddressRefused):
    """EC2 refused the association for the instance's sake, whatever the address: its VPC has no internet gateway
    attached (``Gateway.NotAttached``), or the role is refused the instance side (``UnauthorizedOperation``) of an
    instance tagged ``nodecycle:owner`` for another owner, or of one whose Auto Scaling tags have not reached it yet.
    Every other address would be refused it the same, so
    none is tried for it, and the address is not the one refused."""


class AddressLocked(AddressRefused):
    """AWS has locked the address: it cannot be released from the account (``InvalidAddress.Locked``; a reverse DNS
    record on it, ``InvalidAddress.PtrSet``) until AWS Support unlocks it (or the record is removed). No wait
    changes that."""


class AddressLimitExceeded(AddressError):
    """The account's Elastic IP quota is used up (``AddressLimitExceeded``)."""


class AddressAlreadyAssociated(AddressError):
    """The address is associated already and was not moved (``Resource.AlreadyAssociated``)."""


class AddressNotFound(AddressError):
    """No such allocation: the address was released, perhaps behind our back (``InvalidAllocationID.NotFound``)."""


class AddressInUse(AddressError):
    """The address is still associated, so it cannot be released (``InvalidIPAddress.InUse``)."""


class InstanceUnavailable(AddressError):
    """The instance cannot take an address now: still pending, or gone.

    EC2 answers both with the same codes (``InvalidInstanceID``, ``InvalidInstanceID.NotFound``,
    ``IncorrectInstanceState``), so the caller asks for the instance's state to tell them apart.
    """


@dataclass(frozen=True)
class Address:
    """One Elastic IP as DescribeAddresses shows it."""

    allocation_id: str
    public_ip: str
    association_id: str | None = None
    instance_id: str | None = None  # None when unassociated, or associated with a bare network interface
    tags: Mapping[str, str] = field(default_factory=dict)
    interface_id: str | None = (
        None  # the network interface it is associated with (an instance's too); None: none
    )

    @property
    def associated(self) -> bool:
        return self.association_id is not None

    @property
    def pool(self) -> str | None:
        return self.tags.get(POOL_TAG)

    @property
    def allocated_for(self) -> str | None:
        """The instance nodecycle allocated this address for, if it did."""
        return self.tags.get(INSTANCE_TAG)

    @property
    def allocated_at(self) -> datetime | None:
        """When nodecycle allocated it; None for an address nodecycle did not allocate (or a mangled tag)."""
        text = self.tags.get(ALLOCATED_AT_TAG)
        if text is None:
            return None
        try:
            stamp = datetime.fromisoformat(text)
        except ValueError:
            return None
        return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)

    @property
    def allocated_into(self) -> str | None:
        """The pool nodecycle allocated this address into, if it did (whatever its pool tag says now)."""
        return self.tags.get(ALLOCATED_INTO_TAG)

    @property
    def by_hand(self) -> bool:
        """Not nodecycle's to take back: tagged with an owner by hand (an operator's static address, another tool's:
        in no pool and without nodecycle's allocation time, or with a mangled one), or retired from its pool by hand
        (allocated into a pool by nodecycle, its pool tag removed since: a stable address, the operator's now).
        Neither the release step nor the sweeper takes it back, releases or disassociates it."""
        return self.pool is None and (self.allocated_at is None or self.allocated_into is not None)


class Addresses(Protocol):
    """Elastic IPs and instance states, in the terms of the EIP steps.

    Every method raises :class:`~nodecycle.domain.errors.TransientError` for throttling and other failures
    worth retrying later, and the :class:`AddressError` named in its docstring for the answers that decide
    what a step does next.
    """

    def find(
        self,
        owner: str,
        *,
        instance_id: str | None = None,
        allocated_for: str | None = None,
        pool: str | None = None,
    ) -> list[Address]:
        """Addresses tagged ``nodecycle:owner=<owner>``, narrowed by every filter given: associated with
        ``instance_id``, tagged as allocated for ``allocated_for``, tagged as members of ``pool``.
        One DescribeAddresses call."""
        ...

    def on_primary_ip(self, instance_id: str) -> list[Address]:
        """The addresses, whoever's (not only nodecycle's), on the instance's primary private IP: the one an
        association with the instance would move off it (an address on another interface or private IP stays
        where it is). One DescribeAddresses call; and when it lists any, one DescribeInstances for the primary
        private IP (unknown: every address listed counts)."""
        ...

    def describe(self, allocation_id: str) -> Address:
        """The address as EC2 shows it now. Raises :class:`AddressNotFound`."""
        ...

    def allocate(self, tags: Mapping[str, str]) -> Address:
        """A new address carrying ``tags`` from its creation. Raises :class:`AddressLimitExceeded`."""
        ...

    def associate(self, allocation_id: str, instance_id: str) -> str:
        """Associate the address with the instance, never moving it from where it is (AllowReassociation
        false); the association id. Raises :class:`AddressAlreadyAssociated`, :class:`AddressNotFound`,
        :class:`InstanceUnavailable`, :class:`InstanceRefused`."""
        ...

    def disassociate(self, association_id: str) -> bool:
        """End this association (never another one); whether this call ended it (one whose answer was lost counts);
        False when another had ended it already."""
        ...

    def release(self, allocation_id: str) -> bool:
        """Release the address; whether this call released it (one whose answer was lost counts); False when
        another had released it already. Raises :class:`AddressInUse`."""
        ...

    def instance_states(self, instance_ids: Collection[str]) -> dict[str, str]:
        """EC2 states (``pending``, ``running``, ``terminated``...) of those instances that EC2 knows; an id
        missing from the answer does not exist (any more). Batched: calls grow with pages, not with ids."""
        ...

    def left_behind(self, interface_ids: Collection[str]) -> set[str]:
        """Those of the network interfaces that no instance holds and no AWS service manages: detached (an
        instance's that outlived it, ``DeleteOnTermination`` off), not a NAT gateway's, a load balancer's, a Lambda
        function's... (requester-managed: their addresses are that service's to disassociate, EC2 refuses anyone
        else). An interface EC2 no longer has is not among them. Batched: calls grow with pages, not with ids."""
        ...

    def launched_at(self, instance_id: str) -> datetime | None:
        """When EC2 last started the instance (its ``LaunchTime``, which a start out of a stopped or hibernated
        state moves); None when EC2 does not know it. One DescribeInstances call."""
        ...

    def launch_state(self, instance_id: str) -> tuple[str, datetime | None] | None:
        """The instance's EC2 state and ``LaunchTime`` as one DescribeInstances answer tells them, of one moment
        (two calls may be answered from different moments, the later from the older: EC2's reads are eventually
        consistent); None when EC2 does not know it."""
        ...


def distinct(*listings: Iterable[Address]) -> list[Address]:
    """The addresses of several listings, each once (the first sighting wins), in order."""
    seen: dict[str, Address] = {}
    for listing in listings:
        for address in listing:
            seen.setdefault(address.allocation_id, address)
    return list(seen.values())
