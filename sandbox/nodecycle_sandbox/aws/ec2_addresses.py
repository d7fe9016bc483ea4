"""AssociateAddress as EC2 answers it, where moto 5 does not.

- An instance (its primary private IP, or a network interface) holds one Elastic IP: associating another one
  with it disassociates the one it had, which stays allocated (the EC2 API reference: "If you associate an
  Elastic IP address with an instance that has an existing Elastic IP address, the existing address is
  disassociated from the instance"). moto keeps both associated, so two concurrent deliveries of one launch
  that each claim a pool address would leave the instance with two, which EC2 never shows.
- ``AllowReassociation`` false refuses an address associated with anything (``Resource.AlreadyAssociated``).
  moto refuses only one associated with an instance: an address on a network interface attached to no
  instance (one that outlived its instance, a NAT box's) it moved to the instance asked for, so a test could
  not see nodecycle take an address from where it was. Left out, it is true: "Reassociation is automatic, but
  you can specify false to ensure the operation fails if the Elastic IP address is already associated with
  another resource" (the AssociateAddress reference, for a VPC). moto took it for false, so a caller that left it
  out was refused where EC2 moves the address off its holder: a call that forgot it could not be seen stealing.
- EC2 decides each association atomically; moto checks ``AllowReassociation`` and then sets, which two
  request threads can interleave (both "win" the same address). The calls are serialized here.
- An address still associated is not released: EC2 answers ``InvalidIPAddress.InUse`` ("you must first
  disassociate the Elastic IP address before you can release it", for addresses of a nondefault VPC, which
  an EKS cluster's are). moto disassociates it silently, which let a release that skipped the
  disassociation pass. In a default VPC, though, EC2 does as moto ("releasing an Elastic IP address
  automatically disassociates it from any instance that it's associated with"): with ``DEFAULT_VPC`` set,
  so does the emulation, and nodecycle must keep an address in use without EC2's refusal.
- An account holds a limited number of Elastic IPs per region (5 by default, "Elastic IP address quota" in
  the EC2 user guide): AllocateAddress beyond it answers ``AddressLimitExceeded`` ("The maximum number of
  addresses has been reached."). moto allocates without end. The quota is per backend (``set_quota``,
  ``AwsControl.configure(address_quota=...)``); none until set, as an account whose quota was raised for its
  fleet, so that sandboxes of many nodes keep allocating.
- An instance takes an address only once it runs: AssociateAddress naming one that is pending, shutting down or
  terminated answers ``InvalidInstanceID`` ("The pending instance 'i-...' is not in a valid state for this
  operation.", the answer EC2 gives a launch that associates too early, or one whose instance was terminated
  meanwhile). moto associated it, so an address could be "held" by a terminated instance. An address gone answers
  ``InvalidAllocationID.NotFound`` first, whatever the instance's state (EC2 does not document which it looks at
  first; this is the harsher order: the caller cannot tell the instance is gone).
- An address associated by a network interface (``NetworkInterfaceId``) is refused the same way while the instance
  the interface is attached to is pending or shutting down, with another code: ``IncorrectInstanceState``
  ("The pending instance to which 'eni-...' is attached is not in a valid state for this operation", EC2's
  answer to an association with the interface of an instance being created). moto associated it, so a caller that took an instance's primary interface from a description of it
  stopped (its start not shown yet: EC2's reads lag) put the address on an instance starting, where EC2 refuses it.
- A terminated instance keeps no address: EC2 disassociates its Elastic IPs, which stay allocated ("Elastic IP
  addresses", EC2 user guide: when an instance is terminated its Elastic IP address is disassociated, and stays
  allocated to the account); an address on a secondary network interface that outlives the instance (not
  deleted on termination) stays with that interface. moto left the address associated with the terminated instance for
  ever, so nothing in the sandbox ever met an address that its instance's termination set free.
- A released address is gone from one answer to the next. moto clears its allocation id and then removes it,
  so a DescribeAddresses served between the two shows an address without an ``AllocationId``, which EC2
  never sends (and which a reader of the answer fails on). Here it is removed with its id intact.
- An address associated by a network interface is the instance's, as EC2 shows it: DescribeAddresses gives the
  instance the interface is attached to (``InstanceId``, "the ID of the instance that the address is associated
  with", the Address data type in the EC2 API reference) and the ``instance-id`` filter finds it. moto left
  ``InstanceId`` empty for such an association and its filter missed it, so an address nodecycle put on the
  primary interface of an instance with several was never seen on its instance (not verified at launch, not
  found at terminate). An interface that outlived its terminated instance shows no instance; an address
  associated with nothing shows neither ``InstanceId`` nor ``NetworkInterfaceId`` (moto sent both empty).
- AssociateAddress by instance id takes an instance with "exactly one attached network interface" (EC2 API
  reference: "If the instance has more than one network interface, you must specify a network interface ID"):
  one with several answers ``InvalidInstanceID`` ("There are multiple interfaces attached to instance
  'i-...'. Please specify an interface ID for the operation instead."). moto put the address on the first
  interface, so nodecycle's path to the primary interface never ran in the sandbox.
- An address is associated with one private IP of its interface: the primary one unless ``PrivateIpAddress`` names a
  secondary one (the AssociateAddress reference: "If no private IP address is specified, the Elastic IP address is
  associated with the primary private IP address"), and DescribeAddresses shows that IP (``PrivateIpAddress``, and
  its ``private-ip-address`` filter). Each private IP holds one address: an association displaces only the address
  on the private IP it goes to, and ``AllowReassociation`` false refuses an address on another private IP of the same
  interface as a move. moto ignored ``PrivateIpAddress``: it put the address on the primary IP, showed every address
  of an interface on its primary IP, and displaced an address on a secondary IP (an operator's, associated with an
  IP the VPC CNI gave the node) when the instance took another, so nodecycle's check of what an association would
  displace (``Ec2Addresses.on_primary_ip``) refused a launch that EC2 lets through and never ran its other branch.
- An Elastic IP reaches its instance through the internet gateway of the instance's VPC: AssociateAddress with an
  instance (or an interface) of a VPC that has none attached answers ``Gateway.NotAttached`` (the EC2 error codes
  reference: "If you are trying to associate an Elastic IP address with a network interface or an instance, ensure
  that an internet gateway is attached to the relevant VPC"; the message as EC2 words it for a NAT gateway, the
  NatGateway data type's FailureMessage: "Network vpc-xxxxxxxx has no Internet gateway attached"), whatever the
  address: the refusal is the instance's. moto associated it. A default VPC comes with an internet gateway (the
  Amazon VPC user guide, default VPCs), which moto's has not: the emulation takes it to have one.
- An address AWS has locked cannot be released from the account: ReleaseAddress answers ``InvalidAddress.Locked``
  ("The specified Elastic IP address cannot be released from your account. A reverse DNS record may be associated
  with the Elastic IP address. To unlock the address, contact AWS Support.", the EC2 error codes reference) whatever
  asks, and the address stays allocated, associated or not. Nothing documents a refusal of AssociateAddress for it:
  it is associated as any other (an address refused to associations for its own sake is a denial by a condition on
  its tags, ``UnauthorizedOperation``, which the sandbox's IAM judges). moto has no such state; a test locks one by
  its allocation id (``lock``).
- An address with a reverse DNS record (a PTR record set on it with ModifyAddressAttribute) cannot be released either:
  ReleaseAddress answers ``InvalidAddress.PtrSet`` until the record is removed (``ResetAddressAttribute``), associated
  or not. moto has no such record; a test sets one by its allocation id (``set_reverse_dns``).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from moto.ec2.exceptions import EC2ClientError, ResourceAlreadyAssociatedError
from moto.ec2.models.elastic_ip_addresses import ElasticAddress, ElasticAddressBackend
from moto.ec2.models.instances import Instance, InstanceState
from moto.ec2.responses.elastic_ip_addresses import ElasticIPAddresses

_LOCK = threading.Lock()
# Whether the AssociateAddress being answered on this thread left AllowReassociation out (EC2: then true)
_REQUEST = threading.local()
_MARKER = "_nodecycle_sandbox_associate"
_QUOTA = "_nodecycle_address_quota"
_LOCKED = "_nodecycle_locked_addresses"
_REVERSE_DNS = "_nodecycle_reverse_dns_addresses"
# The private IP of its interface an address is associated with (unset or None: the interface's primary one)
_PRIVATE_IP = "_nodecycle_private_ip"
# the states in which EC2 refuses to associate an address with an instance (stopped and stopping are allowed:
# an address stays with a stopped instance, and may be associated with one)
_CANNOT_ASSOCIATE = frozenset({"pending", "shutting-down", "terminated"})
# the states in which EC2 refuses an address to the network interfaces attached to an instance
_STARTING_OR_GOING = frozenset({"pending", "shutting-down"})
# True: ReleaseAddress answers as for addresses of a default VPC (an address in use is disassociated and
# released, no error); False: as for those of a nondefault VPC (refused while associated). Read per call.
DEFAULT_VPC = False


def install() -> None:
    """Idempotent: a second call changes nothing (a second wrapper would wait for its own lock)."""
    if getattr(ElasticAddressBackend, _MARKER, False):
        return
    original = ElasticAddressBackend.associate_address
    original_terminate = Instance.terminate

    def terminate(self: Instance) -> InstanceState:
        # the interfaces that go with the instance: those deleted on termination, and its primary one (the
        # interface a launch creates is deleted with its instance by default; moto keeps it, and cannot tell a
        # launch that asked otherwise)
        going = [nic for index, nic in self.nics.items() if index == 0 or nic.delete_on_termination]
        interfaces = list(self.nics.values())
        previous = original_terminate(self)
        for nic in interfaces:
            if nic not in going:
                _detach(self, nic)
        with _LOCK:
            for address in self.ec2_backend.addresses:
                if address.instance is not self and address.eni not in interfaces:
                    continue
                if address.eni is not None and address.eni not in going:
                    address.instance = None  # stays with the interface, which outlives the instance
                    continue
                address.instance = None
                address.eni = None
                address.association_id = None
        return previous

    original_allocate = ElasticAddressBackend.allocate_address

    def allocate_address(
        self: ElasticAddressBackend, domain: str, address: str | None = None, tags: Any = None
    ) -> ElasticAddress:
        with _LOCK:
            quota: int | None = getattr(self, _QUOTA, None)
            if quota is not None and len(self.addresses) >= quota:
                raise EC2ClientError(
                    "AddressLimitExceeded", "The maximum number of addresses has been reached."
                )
            return original_allocate(self, domain, address=address, tags=tags)

    def associate_address(
        self: ElasticAddressBackend,
        instance: Any = None,
        eni: Any = None,
        address: str | None = None,
        allocation_id: str | None = None,
        reassociate: bool = False,
    ) -> ElasticAddress:
        if getattr(_REQUEST, "reassociation_left_out", False):
            reassociate = True
        with _LOCK:
            # (the address is looked up before the instance: an address gone answers NotFound whatever the
            # instance's state, the harsher order, which EC2 does not document; moto looked the instance up first)
            (found,) = (
                self.address_by_ip([address])
                if address
                else self.address_by_allocation([allocation_id or ""])
            )
            state = instance.state if instance is not None else None
            if state in _CANNOT_ASSOCIATE:
                raise EC2ClientError(
                    "InvalidInstanceID",
                    f"The {state} instance '{instance.id}' is not in a valid state for this operation.",
                )
            attached = getattr(eni, "instance", None) if eni is not None else None
            # (an interface that outlived its terminated instance is detached from it: available, it takes one)
            if (
                attached is not None
                and attached.state in _STARTING_OR_GOING
                and eni in attached.nics.values()
            ):
                raise EC2ClientError(
                    "IncorrectInstanceState",
                    f"The {attached.state} instance to which '{eni.id}' is attached is not in a valid state for "
                    "this operation",
                )
            if eni is None and instance is not None and len(instance.nics) > 1:
                raise EC2ClientError(
                    "InvalidInstanceID",
                    f"There are multiple interfaces attached to instance '{instance.id}'. Please specify an "
                    "interface ID for the operation instead.",
                )
            # (an instance is asked for by its primary interface, where moto associates it, and by its primary private
            # IP, unless the request names another of that interface's)
            target = eni if eni is not None else instance.nics[0] if instance is not None else None
            vpc_id = getattr(getattr(target, "subnet", None), "vpc_id", None)
            if vpc_id is not None and not _reaches_the_internet(self, vpc_id):
                raise EC2ClientError(
                    "Gateway.NotAttached", f"Network {vpc_id} has no Internet gateway attached"
                )
            place = getattr(_REQUEST, "private_ip", None) or getattr(target, "private_ip_address", None)
            if (
                not reassociate
                and found.eni is not None
                and (found.eni is not target or _ip_of(found) != place)
            ):
                raise ResourceAlreadyAssociatedError(found.public_ip)  # (the same place again is not a move)
            public_ip = getattr(target, "public_ip", None)
            associated = original(self, instance, eni, address, allocation_id, reassociate)
            setattr(associated, _PRIVATE_IP, place)
            if target is not None and place != target.private_ip_address:
                target.public_ip = public_ip  # (moto's public IP of the interface is its primary IP's)
            for other in self.addresses:
                if (
                    other is not associated
                    and other.eni is not None
                    and other.eni is associated.eni
                    and _ip_of(other) == place
                ):
                    other.instance = None
                    other.eni = None
                    other.association_id = None
            return associated

    def release_address(
        self: ElasticAddressBackend, address: str | None = None, allocation_id: str | None = None
    ) -> None:
        with _LOCK:
            found = (
                self.address_by_ip([address])
                if address
                else self.address_by_allocation([allocation_id or ""])
            )
            if found[0].allocation_id in getattr(self, _LOCKED, set()):
                raise EC2ClientError(
                    "InvalidAddress.Locked",
                    "The specified Elastic IP address cannot be released from your account. A reverse DNS record "
                    "may be associated with the Elastic IP address. To unlock the address, contact AWS Support.",
                )
            if found[0].allocation_id in getattr(self, _REVERSE_DNS, set()):
                raise EC2ClientError(
                    "InvalidAddress.PtrSet",
                    "The Elastic IP address cannot be released because a reverse DNS (PTR) record is set for it. "
                    "Remove the record before you release the address.",
                )
            in_use = found[0].eni is not None or found[0].instance is not None
            if in_use and not DEFAULT_VPC:
                raise EC2ClientError("InvalidIPAddress.InUse", f"Address {found[0].allocation_id} is in use.")
            if in_use:
                self.disassociate_address(address=found[0].public_ip)
            self.addresses.remove(found[0])
            self.tags.pop(found[0].allocation_id, None)  # type: ignore[attr-defined]  # EC2 forgets them too

    original_filter = ElasticAddress.get_filter_value

    def get_filter_value(self: ElasticAddress, filter_name: str, method_name: str | None = None) -> Any:
        if filter_name == "instance-id":
            holder = _holder(self)
            return holder.id if holder is not None else None
        if filter_name == "private-ip-address":
            return _ip_of(self)
        return original_filter(self, filter_name, method_name)

    original_request = ElasticIPAddresses.associate_address

    @functools.wraps(original_request)  # (its name is the call's, as the EC2 lag records it)
    def associate_request(self: ElasticIPAddresses) -> Any:
        _REQUEST.reassociation_left_out = "AllowReassociation" not in self._get_params()
        _REQUEST.private_ip = self._get_param("PrivateIpAddress")
        try:
            return original_request(self)
        finally:
            _REQUEST.reassociation_left_out = False
            _REQUEST.private_ip = None

    ElasticIPAddresses.associate_address = associate_request  # type: ignore[method-assign]
    Instance.terminate = terminate  # type: ignore[method-assign]
    # (DescribeAddresses answers with these attributes of the model; None leaves a field out, as EC2 does)
    ElasticAddress.instance_id = property(_instance_id)  # type: ignore[assignment,method-assign]
    ElasticAddress.network_interface_id = property(_interface_id)  # type: ignore[assignment,method-assign]
    ElasticAddress.private_ip_address = property(_ip_of)  # type: ignore[assignment,method-assign]
    ElasticAddress.get_filter_value = get_filter_value  # type: ignore[method-assign]
    ElasticAddressBackend.allocate_address = allocate_address  # type: ignore[method-assign]
    ElasticAddressBackend.associate_address = associate_address  # type: ignore[method-assign]
    ElasticAddressBackend.release_address = release_address  # type: ignore[method-assign]
    setattr(ElasticAddressBackend, _MARKER, True)


def _detach(instance: Instance, interface: Any) -> None:
    """An interface that outlives its terminated instance, detached as EC2 detaches it: ``available`` to another
    instance, with no attachment (moto kept it ``in-use``, attached to the terminated instance, so a caller asking
    whether an interface was left behind by its instance could never be told so)."""
    instance.nics.pop(interface.device_index, None)
    interface.instance = None
    interface.attachment_id = None
    interface.attach_time = None
    interface.device_index = None
    interface.status = "available"


def _reaches_the_internet(ec2_backend: Any, vpc_id: str) -> bool:
    """Whether the VPC has an internet gateway attached: one attached to it, or it is the default VPC (which comes
    with one in EC2; moto's has none)."""
    vpc = ec2_backend.vpcs.get(vpc_id)
    if vpc is not None and vpc.is_default:
        return True
    return any(
        gateway.vpc is not None and gateway.vpc.id == vpc_id
        for gateway in ec2_backend.internet_gateways.values()
    )


def _holder(address: ElasticAddress) -> Instance | None:
    """The instance an address is associated with: the one asked for, or the one its interface is attached to
    (none once that instance is terminated: EC2 detaches the interfaces that outlive it)."""
    if address.instance is not None:
        held: Instance = address.instance
        return held
    interface = address.eni
    attached: Instance | None = getattr(interface, "instance", None)
    if attached is None or attached.state == "terminated" or interface not in attached.nics.values():
        return None
    return attached


def _instance_id(address: ElasticAddress) -> str | None:
    holder = _holder(address)
    return None if holder is None else str(holder.id)


def _ip_of(address: ElasticAddress) -> str | None:
    """The private IP the address is associated with: the one its association named, or its interface's primary."""
    if address.eni is None:
        return None
    named: str | None = getattr(address, _PRIVATE_IP, None)
    return named or address.eni.private_ip_address


def _interface_id(address: ElasticAddress) -> str | None:
    return None if address.eni is None else str(address.eni.id)


def set_quota(ec2_backend: Any, addresses: int | None) -> None:
    """How many Elastic IPs ``ec2_backend``'s account may hold in its region; None: no limit."""
    setattr(ec2_backend, _QUOTA, addresses)


def lock(ec2_backend: Any, allocation_id: str) -> None:
    """AWS locks the address: ReleaseAddress refuses it (``InvalidAddress.Locked``) from now on."""
    with _LOCK:
        locked: set[str] = getattr(ec2_backend, _LOCKED, set())
        setattr(ec2_backend, _LOCKED, locked | {allocation_id})


def unlock(ec2_backend: Any, allocation_id: str) -> None:
    """AWS Support unlocks the address: ReleaseAddress releases it again."""
    with _LOCK:
        locked: set[str] = getattr(ec2_backend, _LOCKED, set())
        setattr(ec2_backend, _LOCKED, locked - {allocation_id})


def set_reverse_dns(ec2_backend: Any, allocation_id: str) -> None:
    """A reverse DNS record is set on the address: ReleaseAddress refuses it (``InvalidAddress.PtrSet``) from now on."""
    with _LOCK:
        records: set[str] = getattr(ec2_backend, _REVERSE_DNS, set())
        setattr(ec2_backend, _REVERSE_DNS, records | {allocation_id})


def reset_reverse_dns(ec2_backend: Any, allocation_id: str) -> None:
    """The address's reverse DNS record is removed: ReleaseAddress releases it again."""
    with _LOCK:
        records: set[str] = getattr(ec2_backend, _REVERSE_DNS, set())
        setattr(ec2_backend, _REVERSE_DNS, records - {allocation_id})
