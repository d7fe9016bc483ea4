"""Elastic IPs and instance states on EC2: the :class:`~nodecycle.domain.eip.addresses.Addresses` port.

EC2's answers become the domain's exceptions by error code, never by message text. Throttling, 5xx and
connection errors become :class:`~nodecycle.domain.errors.TransientError` (``transient_errors``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from nodecycle.adapters.aws.clients import LazyClient, answer_lost, error_code, transient_errors
from nodecycle.adapters.aws.instances import GROUP_NAME_TAG, Ec2Instances
from nodecycle.domain.errors import AccessRefused
from nodecycle.domain.ports.addresses import (
    INSTANCE_TAG,
    OWNER_TAG,
    POOL_TAG,
    Address,
    AddressAlreadyAssociated,
    AddressError,
    AddressInUse,
    AddressLimitExceeded,
    AddressLocked,
    AddressNotFound,
    AddressRefused,
    InstanceRefused,
    InstanceUnavailable,
)

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import FilterTypeDef

_NOT_FOUND = "InvalidAllocationID.NotFound"
# An instance that cannot take an address now (pending, gone), or that EC2 does not know yet; and, once the address
# goes to the primary interface of an instance with several, an interface EC2 does not know yet (eventually
# consistent: it was just attached) or any more (the instance went): the step tells them apart by the state
_INSTANCE_UNAVAILABLE = (
    "InvalidInstanceID",
    "InvalidInstanceID.NotFound",
    "IncorrectInstanceState",
    "InvalidNetworkInterfaceID.NotFound",
)

# The states in which EC2 associates an address with an instance: a stopped (or stopping) one too, whose address
# stays with it; an instance of one interface in them is taken by its id, so one of several by its primary
# interface (a pending instance waits: it will run; one shutting down or terminated is gone)
_TAKES_AN_ADDRESS = frozenset({"running", "stopping", "stopped"})

# EC2 takes at most 200 values in one filter (DescribeNetworkInterfaces: "the maximum number of values per filter")
_FILTER_VALUES = 200


@dataclass(frozen=True)
class InstanceGrants:
    """What the template grants the EIP role on AssociateAddress's instance side, as this stack's settings tell it:
    instances of the groups managed by name (``names``), and, when groups are managed by tag (``by_tag``), instances
    tagged ``nodecycle:owner`` for this stack. (Not the retiring groups', granted by name too: the functions never read
    RetiringGroups.) Only a refused association asks it, to tell the instance's refusal from the address's."""

    names: frozenset[str] = frozenset()
    by_tag: bool = False


class Ec2Addresses:
    def __init__(self, ec2: EC2Client | None = None, *, grants: InstanceGrants | None = None) -> None:
        # (None: nothing known of the grants on instances; only their tags' own contradictions tell the instance's
        # refusal)
        self._grants = grants
        # (a release or disassociation whose answer was lost is told from one another caller made: see release)
        self._ec2: LazyClient[EC2Client] = LazyClient(
            "ec2", ec2, telling_lost_answers=("DisassociateAddress", "ReleaseAddress")
        )

    def find(
        self,
        owner: str,
        *,
        instance_id: str | None = None,
        allocated_for: str | None = None,
        pool: str | None = None,
    ) -> list[Address]:
        filters = [_filter(f"tag:{OWNER_TAG}", owner)]
        if instance_id is not None:
            filters.append(_filter("instance-id", instance_id))
        if allocated_for is not None:
            filters.append(_filter(f"tag:{INSTANCE_TAG}", allocated_for))
        if pool is not None:
            filters.append(_filter(f"tag:{POOL_TAG}", pool))
        # DescribeAddresses has no pagination: one call answers for every matching address.
        with _answers({}), transient_errors("listing Elastic IPs"):
            found = self._ec2().describe_addresses(Filters=filters)
        return [_address(item) for item in found.get("Addresses", [])]

    def on_primary_ip(self, instance_id: str) -> list[Address]:
        with _answers({}), transient_errors("listing an instance's Elastic IPs"):
            found = self._ec2().describe_addresses(Filters=[_filter("instance-id", instance_id)])
        items = found.get("Addresses", [])
        if not items:
            return []  # (a launch, nearly always: one call)
        with _answers({}):
            described = next(iter(Ec2Instances(self._ec2()).describe([instance_id])), None)
        primary = described.get("PrivateIpAddress") if described is not None else None
        return [
            _address(item)
            for item in items
            if primary is None or item.get("PrivateIpAddress") in (None, primary)
        ]

    def describe(self, allocation_id: str) -> Address:
        with _answers({_NOT_FOUND: AddressNotFound}), transient_errors("describing an Elastic IP"):
            found = self._ec2().describe_addresses(AllocationIds=[allocation_id])
        addresses = found.get("Addresses", [])
        if not addresses:
            raise AddressNotFound(allocation_id)
        return _address(addresses[0])

    def allocate(self, tags: Mapping[str, str]) -> Address:
        with (
            _answers({"AddressLimitExceeded": AddressLimitExceeded}),
            transient_errors("allocating an Elastic IP"),
        ):
            allocated = self._ec2().allocate_address(
                Domain="vpc",
                TagSpecifications=[
                    {
                        "ResourceType": "elastic-ip",
                        "Tags": [{"Key": key, "Value": value} for key, value in tags.items()],
                    }
                ],
            )
        return Address(
            allocation_id=allocated["AllocationId"], public_ip=allocated["PublicIp"], tags=dict(tags)
        )

    def associate(self, allocation_id: str, instance_id: str) -> str:
        answers: dict[str, type[AddressError]] = {
            "Resource.AlreadyAssociated": AddressAlreadyAssociated,
            _NOT_FOUND: AddressNotFound,
            # (the instance's VPC has no internet gateway: refused whatever the address, the instance's refusal)
            "Gateway.NotAttached": InstanceRefused,
        }
        answers.update(dict.fromkeys(_INSTANCE_UNAVAILABLE, InstanceUnavailable))
        gone = self._association_side_gone(allocation_id, instance_id)
        try:
            with _unless_gone(gone), transient_errors("associating an Elastic IP"):
                associated = self._ec2().associate_address(
                    AllocationId=allocation_id, AllowReassociation=False, InstanceId=instance_id
                )
        except (AddressNotFound, InstanceUnavailable):
            raise
        except AccessRefused as error:
            raise AddressRefused(str(error)) from error  # (as _answers says it)
        except ClientError as error:
            # EC2 takes an instance id only while the instance has one network interface; once the VPC CNI
            # has attached more (a retry, a warm-pool launch), it wants the primary interface instead.
            interface = (
                self._primary_interface(instance_id) if error_code(error) == "InvalidInstanceID" else None
            )
            if interface is None:
                with _answers(answers):
                    raise
            with _answers(answers), _unless_gone(gone), transient_errors("associating an Elastic IP"):
                associated = self._ec2().associate_address(
                    AllocationId=allocation_id, AllowReassociation=False, NetworkInterfaceId=interface
                )
        return str(associated["AssociationId"])

    def _primary_interface(self, instance_id: str) -> str | None:
        """The primary network interface of an instance that has several and can take an address now; None
        otherwise."""
        with _answers({}):
            described = list(Ec2Instances(self._ec2()).describe([instance_id]))
        for instance in described:
            interfaces = instance.get("NetworkInterfaces", [])
            state = instance.get("State", {}).get("Name")
            if state in _TAKES_AN_ADDRESS and len(interfaces) > 1:
                for interface in interfaces:
                    attachment = interface.get("Attachment", {})
                    # the primary is device 0 of network card 0 (instances with several cards have a
                    # device 0 on each)
                    if attachment.get("DeviceIndex") == 0 and attachment.get("NetworkCardIndex", 0) == 0:
                        return str(interface["NetworkInterfaceId"])
        return None

    def disassociate(self, association_id: str) -> bool:
        """True when this call ended the association: as :meth:`release` tells it, an association EC2 no longer
        has at a retry of botocore's was ended by an earlier attempt of this call, whose answer was lost."""
        try:
            with (
                _answers({"InvalidAssociationID.NotFound": AddressNotFound}),
                _unless_gone(self._association_gone(association_id)),
                transient_errors("disassociating an Elastic IP"),
            ):
                self._ec2().disassociate_address(AssociationId=association_id)
        except AddressNotFound as error:
            return answer_lost(error.__cause__)
        return True

    def release(self, allocation_id: str) -> bool:
        """True when this call released the address. EC2 does not tell whose call released one it no longer
        has (``InvalidAllocationID.NotFound``): at the call's first attempt, another's (released since the caller
        looked at it), as at a retry after a throttled attempt (which never reached it); at a retry after an
        attempt whose answer was lost (a read timeout, a 5xx other than a throttle), this call's, which that
        attempt may have released. Told so, every caller counts it alike (as released, and as room under the
        quota)."""
        answers = {
            "InvalidIPAddress.InUse": AddressInUse,
            _NOT_FOUND: AddressNotFound,
            "InvalidAddress.Locked": AddressLocked,
            "InvalidAddress.PtrSet": AddressLocked,
        }
        try:
            with (
                _answers(answers),
                _unless_gone(self._allocation_gone(allocation_id)),
                transient_errors("releasing an Elastic IP"),
            ):
                self._ec2().release_address(AllocationId=allocation_id)
        except AddressNotFound as error:
            return answer_lost(error.__cause__)
        return True

    def _listed(self, allocation_id: str) -> list[Any]:
        """The address as EC2 lists it: none once it is gone (released, or never known)."""
        try:
            with transient_errors("describing an Elastic IP"):
                found = self._ec2().describe_addresses(AllocationIds=[allocation_id])
        except ClientError as error:
            if error_code(error) == _NOT_FOUND:
                return []
            raise
        return list(found.get("Addresses") or [])

    def _allocation_gone(self, allocation_id: str) -> _Gone:
        def gone() -> type[AddressError] | None:
            return None if self._listed(allocation_id) else AddressNotFound

        return gone

    def _association_gone(self, association_id: str) -> _Gone:
        def gone() -> type[AddressError] | None:
            with transient_errors("describing an Elastic IP"):
                found = self._ec2().describe_addresses(Filters=[_filter("association-id", association_id)])
            return None if found.get("Addresses") else AddressNotFound

        return gone

    def _association_side_gone(self, allocation_id: str, instance_id: str) -> _Gone:
        """(AssociateAddress) The address gone, or the instance: the template grants the call on instances of the
        managed groups only (by their group's tag), which one EC2 no longer has (or does not have yet) is not.

        Or the instance refused for its own sake: the template grants the instance side on no instance tagged
        ``nodecycle:owner`` for another owner than the address's, nor on one whose tags have not reached it yet
        (``_instance_refusal``; EC2 authorizes AssociateAddress on the address and
        the instance alike, and answers a denial on either UnauthorizedOperation: only the resources tell them
        apart, never the message, which names the resource only in newer answers). Told as the address's refusal,
        a pool launch would go on past each address of its pool, telling each refused to the pool's line."""

        def gone() -> AddressError | type[AddressError] | None:
            listed = self._listed(allocation_id)
            if not listed:
                return AddressNotFound
            with transient_errors("describing an instance"):
                known = next(iter(Ec2Instances(self._ec2()).describe([instance_id])), None)
            if known is None:
                return InstanceUnavailable
            return _instance_refusal(_tags(listed[0]), instance_id, _tags(known), self._grants)

        return gone

    def instance_states(self, instance_ids: Collection[str]) -> dict[str, str]:
        # a denial of DescribeInstances alone (a service control policy) is a refusal like the others: the
        # steps decide about it (asked again, then the policy), rather than fail their message to the DLQ
        with _answers({}):
            return Ec2Instances(self._ec2()).states(instance_ids)

    def left_behind(self, interface_ids: Collection[str]) -> set[str]:
        # (filtered by id rather than named: NetworkInterfaceIds fails the whole call for one interface gone)
        ids = sorted(set(interface_ids))
        left: set[str] = set()
        for start in range(0, len(ids), _FILTER_VALUES):
            pages: dict[str, Any] = {}
            while True:
                with _answers({}), transient_errors("describing network interfaces"):
                    found = self._ec2().describe_network_interfaces(
                        Filters=[
                            {"Name": "network-interface-id", "Values": ids[start : start + _FILTER_VALUES]}
                        ],
                        **pages,
                    )
                left |= {
                    str(interface["NetworkInterfaceId"])
                    for interface in found.get("NetworkInterfaces", [])
                    if _left_behind(interface)
                }
                token = found.get("NextToken")
                if not token:
                    break
                pages = {"NextToken": token}
        return left

    def launched_at(self, instance_id: str) -> datetime | None:
        with _answers({}):
            found = next(iter(Ec2Instances(self._ec2()).describe([instance_id])), None)
        return None if found is None else found.get("LaunchTime")

    def launch_state(self, instance_id: str) -> tuple[str, datetime | None] | None:
        with _answers({}):
            found = next(iter(Ec2Instances(self._ec2()).describe([instance_id])), None)
        return None if found is None else (found["State"]["Name"], found.get("LaunchTime"))


@contextmanager
def _answers(errors: Mapping[str, type[AddressError]]) -> Iterator[None]:
    """Turn the EC2 error codes that decide what a step does into the domain's exceptions; any other error
    EC2 answers (throttling and 5xx are transient already) is a refusal no retry changes. A denial of the role
    is the EIP steps' AddressRefused too, as those steps decide on it (asked again, then their policy)."""
    try:
        yield
    except ClientError as error:
        raise errors.get(error_code(error), AddressRefused)(str(error)) from error
    except AccessRefused as error:
        raise AddressRefused(str(error)) from error


# What a refused call's resources are, asked once it is refused: the domain's NotFound of the one gone (or the
# refusal it is, told by its resources: see _association_side_gone), or None
_Gone = Callable[[], AddressError | type[AddressError] | None]


def _instance_refusal(
    address: Mapping[str, str],
    instance_id: str,
    tags: Mapping[str, str],
    grants: InstanceGrants | None,
) -> InstanceRefused | None:
    """The instance's refusal when its tags hold it out of every grant of the instance side; None otherwise (the
    refusal is then the address's, for its own sake, whatever the instance).

    Held out: tagged ``nodecycle:owner`` for another owner than the address's (this stack's: the steps take only
    addresses of their owner); or carrying neither tag the grants name (``aws:autoscaling:groupName``, by the
    group's name; ``nodecycle:owner``, by the group's tag), or, in a stack managing groups by name alone, no group
    name (tagged for this stack by its launch template, whose tags come with RunInstances). Auto Scaling writes an
    instance's tags as a step of its launch, and they may show on it moments after the instance itself: a launch
    refused then is refused whatever the address, and asked again (REFUSED_DELAY on) once they are there. Or, groups
    managed by tag, of a group not managed by name and not tagged for this stack: its group's owner tag does not
    propagate to its instances (PropagateAtLaunch), and never will for this one. Told as an address's refusal, a pool
    launch told its pool's line each address refused and, its pool growing when empty, grew it past them for good: by
    one address a launch, each launch abandoned and replaced, until the account's quota.

    (An instance of a retiring group, granted by its name, is judged so too in a stack managing by tag: an address
    refused for its own sake to such a launch is taken for the instance's, and no other address tried for it.)"""
    theirs = tags.get(OWNER_TAG)
    ours = address.get(OWNER_TAG)
    group = tags.get(GROUP_NAME_TAG)
    refused = f"the role is refused the association on instance {instance_id} (UnauthorizedOperation)"
    if theirs is None and group is None:
        return InstanceRefused(
            f"{refused}: it carries neither {GROUP_NAME_TAG} nor {OWNER_TAG} yet, the tags the role is granted "
            "instances by (Auto Scaling writes them at the launch; an instance that never gets them is not of an "
            "Auto Scaling group)"
        )
    if theirs is None and grants is not None and grants.by_tag and group not in grants.names:
        return InstanceRefused(
            f"{refused}: it is of group {group}, not managed by name, and carries no {OWNER_TAG} tag, which the role "
            f"is granted the instances of groups managed by tag by (set the group's {OWNER_TAG} tag to propagate "
            "at launch, PropagateAtLaunch true: instances launched from then on carry it; tag the running ones)"
        )
    if theirs is not None and ours is not None and theirs != ours:
        return InstanceRefused(
            f"{refused}: it is tagged {OWNER_TAG}={theirs}, not {ours}'s, and this stack may associate no address "
            f"with it (retag it {OWNER_TAG}={ours} if it is this stack's)"
        )
    if group is None and grants is not None and not grants.by_tag:
        # (its owner tag from its launch template, with RunInstances, its group name not there yet: granted by the
        # group name alone in a stack managing by name, the owner tag only keeping another owner's instances out)
        return InstanceRefused(
            f"{refused}: it carries no {GROUP_NAME_TAG} yet, the tag the role is granted the instances of groups "
            "managed by name by (Auto Scaling writes it at the launch; an instance that never gets it is not of an "
            "Auto Scaling group)"
        )
    return None


@contextmanager
def _unless_gone(gone: _Gone) -> Iterator[None]:
    """A refusal of a call on an address (``UnauthorizedOperation``) that EC2 no longer has is its NotFound.

    The template grants the address actions on addresses carrying the owner tag only, and IAM decides before EC2
    looks the address up: an address released since (by another caller, or by an earlier attempt of this very
    call whose answer was lost), or an association ended since, has no tags, the condition fails, and EC2 answers
    UnauthorizedOperation where an unconditional grant would hear ``InvalidAllocationID.NotFound`` (or
    ``InvalidAssociationID.NotFound``). Asked (DescribeAddresses, granted on every address), EC2 tells the two
    apart: gone, it is :class:`AddressNotFound` with the refusal's ClientError as its cause (whose answer tells
    whether an earlier attempt was lost: ``answer_lost``); still there, the refusal stands. An AssociateAddress
    naming an instance EC2 no longer has is refused so too (the grant on instances is by their group's tag): that
    instance is :class:`InstanceUnavailable`, as its InvalidInstanceID.NotFound. Only a refusal costs the look: a
    call that succeeds makes no other. Nor does a refusal after an attempt of the call whose answer was lost
    (``answer_lost``: a release or disassociation sent again by botocore): IAM does not change its mind between
    two attempts a second apart, so the resource did, that attempt having done the call; and a look right after it
    would still show the address (EC2's reads lag its writes), taking this call's own release for a refusal."""
    try:
        yield
    except AccessRefused as error:
        missing = AddressNotFound if answer_lost(error.__cause__) else gone()
        if isinstance(missing, AddressError):
            raise missing from error.__cause__
        if missing is not None:
            raise missing(str(error)) from error.__cause__
        raise


def _left_behind(interface: Mapping[str, Any]) -> bool:
    """A network interface no instance holds (``available``: detached) and no AWS service manages (a NAT gateway's
    is requester-managed and ``in-use``; one a service detached and did not delete is requester-managed still)."""
    return interface.get("Status") == "available" and not interface.get("RequesterManaged", False)


def _filter(name: str, value: str) -> FilterTypeDef:
    return {"Name": name, "Values": [value]}


def _tags(item: Mapping[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag.get("Value", "") for tag in item.get("Tags", [])}


def _address(item: Mapping[str, Any]) -> Address:
    return Address(
        allocation_id=item["AllocationId"],
        public_ip=item["PublicIp"],
        association_id=item.get("AssociationId") or None,
        instance_id=item.get("InstanceId") or None,
        interface_id=item.get("NetworkInterfaceId") or None,
        tags=_tags(item),
    )
