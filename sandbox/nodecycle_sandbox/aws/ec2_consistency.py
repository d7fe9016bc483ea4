"""EC2 that lags: its reads, for a while after a write, see the state before it.

The EC2 API is eventually consistent ("Eventual consistency in the Amazon EC2 API", EC2 API reference): right
after ``RunInstances`` the new instance id may answer ``InvalidInstanceID.NotFound``; right after
``AllocateAddress`` the allocation id may answer ``InvalidAllocationID.NotFound`` to ``AssociateAddress``,
``ReleaseAddress``, ``CreateTags`` and ``DescribeAddresses``; ``DescribeAddresses`` and ``DescribeInstances``
may show the state before an acknowledged ``AssociateAddress``, ``DisassociateAddress``, ``ReleaseAddress`` or
``CreateTags`` (a tag filter missing the address just tagged), usually for less than a second, for seconds
under load. moto answers every read from the latest state, so nothing in the sandbox ever met a stale read.

Armed (:meth:`Ec2Lag.arm`, ``AwsControl.lag_ec2``, ``Sandbox.lagging_ec2``) with a window of ``seconds``, for
requests signed by ``callers`` (the functions' access keys; None: anyone), as AWS faults are armed:

- every write from then on is remembered for the window: an address's state before each EC2 call that changed
  it (allocated, associated, disassociated, released, tagged, untagged, or moved off an interface by another
  association), and each instance launched (``RunInstances``, Auto Scaling's launches included);
- a lagging caller's ``DescribeAddresses`` sees each address as it was ``seconds`` ago: one allocated since is
  not listed (named, ``InvalidAllocationID.NotFound``), one released since is still listed, an association
  made since does not show, one ended since still does, tags as they were (its filters judge that state);
- its ``DescribeInstances`` and ``DescribeInstanceStatus`` do not list an instance launched since (named by
  ``InstanceIds``: ``InvalidInstanceID.NotFound``); its ``DescribeInstances`` shows each instance's state and tags
  as they were ``seconds`` ago (a stop, a start, a termination, a ``CreateTags`` or ``DeleteTags`` of an instance
  made since does not show yet: EC2 says a state change may take a while to show, and lists a tag just written
  late), its ``LaunchTime`` with them, as one view (a start not shown yet has not moved it on); its filters judge
  the latest state, as nodecycle filters by instance id only;
- a termination's own disassociation of the instance's addresses (EC2's, not a call's) is a write as the others:
  a lagging ``DescribeAddresses`` still shows the terminated instance's association for the window;
- its calls naming an id EC2 did not have ``seconds`` ago answer that id's NotFound code
  (``AssociateAddress``, ``DisassociateAddress`` of an association made since, ``ReleaseAddress``,
  ``CreateTags``, ``DeleteTags``); its ``ReleaseAddress`` of an address disassociated within the window answers
  ``InvalidIPAddress.InUse`` (the disassociation not settled yet: EC2 refuses to release an address until it has).
  Every other write decides on EC2's own state, as EC2 does: an address shown free but associated since is refused
  (``Resource.AlreadyAssociated``).

EC2's reads are not monotonic either: a request is answered by one of several replicas, a later read from one
further behind than an earlier one's. Armed with ``fresh`` (a callable asked once per lagging read), a read it
answers True for sees the latest state (a replica that has every write), the others the lagged state above, so
that a test can order a fresh answer before a stale one (:func:`alternating`). Without it every lagging read in
the window is stale (a monotonic lag).

The requests of other callers (the test's, the operator's, the runner's) see the latest state, as ever. The
window's clock is ``time.monotonic`` unless a test gives its own (``clock``), so that a test that runs a
function's delayed steps at once can move time on by their delays instead of sleeping.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models.instances import Instance, InstanceBackend, InstanceState, Reservation
from moto.ec2.responses.elastic_ip_addresses import ElasticIPAddresses
from moto.ec2.responses.instances import InstanceResponse
from moto.ec2.responses.tags import TagResponse

_MARKER = "_nodecycle_sandbox_ec2_lag"
_WRITING = threading.Lock()
# An access key id as moto reads it from a request's signature (moto.core.responses.BaseResponse.access_key_regex):
# a caller signing with a key of any other shape is seen as moto's default, never as itself, so a lag armed for its
# key would lag nothing
_ACCESS_KEY = re.compile(r"[A-Z0-9]{20}")
# The NotFound code of an id EC2 does not know, by its prefix
_NOT_FOUND = {
    "eipalloc": "InvalidAllocationID.NotFound",
    "eipassoc": "InvalidAssociationID.NotFound",
    "i": "InvalidInstanceID.NotFound",
}

View = dict[str, Any]  # one address as DescribeAddresses answers it
# one instance's state (name, code), tags (moto's describe_tags items) and launch time, as DescribeInstances
# answers them
InstanceView = tuple[tuple[str, int], tuple[tuple[str, str], ...], Any]


class Ec2Lag:
    """The lag of this process's EC2 (one per process, as the AWS fault injector)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.seconds = 0.0
        self._callers: frozenset[str] | None = frozenset()
        self.clock: Callable[[], float] = time.monotonic
        # allocation id -> [(when, the address before that write; None: it did not exist)], oldest first
        self._addresses: dict[str, list[tuple[float, View | None]]] = {}
        self._launched: dict[str, float] = {}  # instance id -> when it was launched
        # instance id -> [(when, its state and tags before that write)], oldest first
        self._instances: dict[str, list[tuple[float, InstanceView]]] = {}
        self.lagged: list[str] = []  # what a lagging read or call met, "<operation> <id>", for tests to see
        # asked once per lagging read: True when the replica answering it has every write (None: never)
        self.fresh: Callable[[], bool] | None = None

    def arm(
        self,
        seconds: float,
        callers: Iterable[str] | None = None,
        clock: Callable[[], float] | None = None,
        fresh: Callable[[], bool] | None = None,
    ) -> None:
        """Lag the reads of ``callers`` (access key ids; None: anyone) ``seconds`` behind the writes made from
        now on (replacing any earlier lag); ``fresh``: which of their reads a replica with every write answers
        (None: none, the lag is monotonic). Raises ValueError for a caller's key that moto would never see as
        that caller's (not 20 upper-case letters and digits): a test arming it would meet no lag at all."""
        callers = None if callers is None else list(callers)
        unseen = sorted(key for key in callers or () if not _ACCESS_KEY.fullmatch(key))
        if unseen:
            raise ValueError(
                f"access key ids {unseen} are not 20 upper-case letters and digits: moto never sees them as a "
                "caller's (it takes such a request for its default key's), so their reads would not lag"
            )
        with self._lock:
            self.fresh = fresh
            self.seconds = float(seconds)
            self._callers = None if callers is None else frozenset(callers)
            self.clock = clock or time.monotonic
            self._addresses.clear()
            self._launched.clear()
            self._instances.clear()
            self.lagged = []

    def disarm(self) -> None:
        self.arm(0.0, ())

    @property
    def armed(self) -> bool:
        return self.seconds > 0

    def lags_for(self, caller: str) -> bool:
        return self.armed and (self._callers is None or caller in self._callers)

    # -- the writes -------------------------------------------------------------------------------

    def wrote(self, before: dict[str, View], after: dict[str, View]) -> None:
        """Remember the addresses a write changed, as they were before it."""
        now = self.clock()
        with self._lock:
            for allocation_id in before.keys() | after.keys():
                if before.get(allocation_id) != after.get(allocation_id):
                    self._addresses.setdefault(allocation_id, []).append((now, before.get(allocation_id)))
            self._forget(now)

    def changed(self, before: dict[str, InstanceView], after: dict[str, InstanceView]) -> None:
        """Remember the instances a write changed (their state or tags), as they were before it."""
        now = self.clock()
        with self._lock:
            for instance_id, view in before.items():
                if after.get(instance_id) != view:
                    self._instances.setdefault(instance_id, []).append((now, view))
            self._forget(now)

    def launched(self, instance_ids: Iterable[str]) -> None:
        now = self.clock()
        with self._lock:
            for instance_id in instance_ids:
                self._launched.setdefault(instance_id, now)

    def _forget(self, now: float) -> None:
        horizon = now - self.seconds
        for allocation_id, writes in list(self._addresses.items()):
            kept = [(at, view) for at, view in writes if at > horizon]
            if kept:
                self._addresses[allocation_id] = kept
            else:
                del self._addresses[allocation_id]
        for instance_id, at in list(self._launched.items()):
            if at <= horizon:
                del self._launched[instance_id]
        for instance_id, changes in list(self._instances.items()):
            recent = [(at, view) for at, view in changes if at > horizon]
            if recent:
                self._instances[instance_id] = recent
            else:
                del self._instances[instance_id]

    # -- what a lagging caller sees -----------------------------------------------------------------

    def addresses_seen(self, current: dict[str, View]) -> dict[str, View] | None:
        """The addresses as they were ``seconds`` ago, from ``current``; None when no write is that recent."""
        now = self.clock()
        with self._lock:
            self._forget(now)
            if not self._addresses:
                return None
            seen = dict(current)
            for allocation_id, writes in self._addresses.items():
                before = writes[0][1]  # (the state before the first write of the window: the one then)
                if before is None:
                    seen.pop(allocation_id, None)
                else:
                    seen[allocation_id] = before
            return seen

    def instance_seen(self, instance_id: str) -> InstanceView | None:
        """The state and tags of ``instance_id`` as of ``seconds`` ago, when a write changed them since; None
        otherwise (the latest are the ones seen)."""
        now = self.clock()
        with self._lock:
            self._forget(now)
            changes = self._instances.get(instance_id)
            return changes[0][1] if changes else None

    def young(self, ids: Iterable[str], current: dict[str, View] | None = None) -> list[str]:
        """Those of ``ids`` EC2 did not have ``seconds`` ago: addresses allocated since, associations made since
        (``current``: the addresses now, where those are found), instances launched since."""
        now = self.clock()
        with self._lock:
            self._forget(now)
            found: list[str] = []
            for resource_id in ids:
                writes = self._addresses.get(resource_id)
                created = writes is not None and writes[0][1] is None
                if created or resource_id in self._launched or self._associated_since(resource_id, current):
                    found.append(resource_id)
            return found

    def disassociated_since(self, allocation_id: str, current: dict[str, View]) -> bool:
        """Whether the address was associated ``seconds`` ago or since, and ``current`` has it unassociated: its
        disassociation not settled yet, which EC2's ReleaseAddress refuses as in use."""
        now = self.clock()
        with self._lock:
            self._forget(now)
            writes = self._addresses.get(allocation_id, [])
            was = any(view is not None and view.get("AssociationId") for _, view in writes)
        address = current.get(allocation_id)
        return was and address is not None and not address.get("AssociationId")

    def _associated_since(self, resource_id: str, current: dict[str, View] | None) -> bool:
        """Whether ``resource_id`` is an association that ``current`` has and the addresses of ``seconds`` ago
        did not."""
        if not resource_id.startswith("eipassoc-") or current is None:
            return False
        seen = self.addresses_seen(current) or current
        then = any(view.get("AssociationId") == resource_id for view in seen.values())
        return not then and any(view.get("AssociationId") == resource_id for view in current.values())

    def stale_read(self, caller: str) -> bool:
        """Whether this read of ``caller`` is answered from the lagged state (asks ``fresh`` once: call once per
        read, so that one answer is of one moment)."""
        if not self.lags_for(caller):
            return False
        with self._lock:
            fresh = self.fresh
        return fresh is None or not fresh()

    def met(self, operation: str, resource_id: str) -> None:
        with self._lock:
            self.lagged.append(f"{operation} {resource_id}")


def alternating(first_fresh: bool = True) -> Callable[[], bool]:
    """A ``fresh`` for :meth:`Ec2Lag.arm`: the lagging reads answered fresh and stale in turn (fresh first, or
    stale first), the harshest order for a step that reads twice."""
    turn = itertools.cycle([first_fresh, not first_fresh])
    lock = threading.Lock()

    def fresh() -> bool:
        with lock:
            return next(turn)

    return fresh


# The one lag of this process (moto serves every account and region of the process).
LAG = Ec2Lag()


def views(ec2_backend: Any) -> dict[str, View]:
    """Every address of ``ec2_backend`` as DescribeAddresses answers it."""
    return {address.allocation_id: _view(ec2_backend, address) for address in list(ec2_backend.addresses)}


def _view(ec2_backend: Any, address: Any) -> View:
    view: View = {
        "AllocationId": address.allocation_id,
        "PublicIp": address.public_ip,
        "Domain": address.domain,
    }
    optional = {
        "InstanceId": address.instance_id,
        "AssociationId": address.association_id,
        "NetworkInterfaceId": address.network_interface_id,
        "NetworkInterfaceOwnerId": address.network_interface_owner_id,
        "PrivateIpAddress": address.private_ip_address,
    }
    view.update({key: value for key, value in optional.items() if value})
    tags = ec2_backend.tags.get(address.allocation_id) or {}
    if tags:
        view["Tags"] = [{"Key": key, "Value": value} for key, value in tags.items()]
    return view


def instance_views(ec2_backend: Any, instance_ids: Iterable[str]) -> dict[str, InstanceView]:
    """The state and tags of those of ``instance_ids`` that ``ec2_backend`` has."""
    found: dict[str, InstanceView] = {}
    wanted = set(instance_ids)
    for reservation in list(ec2_backend.reservations.values()):
        for instance in reservation.instances:
            if instance.id in wanted:
                found[instance.id] = _instance_view(instance)
    return found


def _instance_view(instance: Any) -> InstanceView:
    tags = tuple(sorted((tag["key"], tag["value"]) for tag in instance.get_tags()))
    return (instance._state.name, instance._state.code), tags, instance.launch_time


def _as_seen(instance: Instance, view: InstanceView) -> Instance:
    """A copy of ``instance`` that answers with the state, tags and launch time of ``view`` (moto renders from
    the object)."""
    (name, code), tags, launch_time = view
    shown = object.__new__(type(instance))
    shown.__dict__.update(instance.__dict__)
    shown._state = InstanceState(name, code)
    shown.launch_time = launch_time
    listed = [
        {"resource_id": instance.id, "resource_type": "instance", "key": k, "value": v} for k, v in tags
    ]
    shown.get_tags = lambda: [dict(tag) for tag in listed]  # type: ignore[method-assign]
    return shown


def _matches(view: View, name: str, wanted: list[str]) -> bool:
    """Whether an address's view passes one DescribeAddresses filter (EC2's ``*`` and ``?`` wildcards)."""
    tags = {tag["Key"]: tag["Value"] for tag in view.get("Tags", [])}
    if name.startswith("tag:"):
        values = [tags[name[4:]]] if name[4:] in tags else []
    elif name == "tag-key":
        values = list(tags)
    elif name == "tag-value":
        values = list(tags.values())
    else:
        field = {
            "allocation-id": "AllocationId",
            "association-id": "AssociationId",
            "domain": "Domain",
            "instance-id": "InstanceId",
            "network-interface-id": "NetworkInterfaceId",
            "network-interface-owner-id": "NetworkInterfaceOwnerId",
            "private-ip-address": "PrivateIpAddress",
            "public-ip": "PublicIp",
        }[name]
        values = [view[field]] if field in view else []
    return any(fnmatch.fnmatchcase(str(value), pattern) for value in values for pattern in wanted)


def _not_found(resource_id: str) -> EC2ClientError:
    code = _NOT_FOUND.get(resource_id.split("-", 1)[0], "InvalidID")
    return EC2ClientError(code, f"The ID '{resource_id}' does not exist")


def install() -> None:
    """Idempotent: a second call changes nothing."""
    if getattr(ElasticIPAddresses, _MARKER, False):
        return

    def writing(operation: Callable[[Any], ActionResult], named: Callable[[Any], list[str]]) -> Any:
        """``operation`` (a write) remembered when the lag is armed, and refused for the ids ``named`` that a
        lagging caller's EC2 does not have yet."""

        def write(self: Any) -> ActionResult:
            if not LAG.armed:
                return operation(self)
            backend = self.ec2_backend
            # (one write at a time while armed, so that each is told apart from the others; never with the lag's
            # own lock held, which reads and Auto Scaling's launches take)
            with _WRITING:
                before = views(backend)
                if LAG.lags_for(self.access_key):
                    for resource_id in LAG.young([i for i in named(self) if i], before):
                        LAG.met(operation.__name__, resource_id)
                        raise _not_found(resource_id)
                    if operation.__name__ == "release_address":
                        for allocation_id in [
                            i for i in named(self) if i and LAG.disassociated_since(i, before)
                        ]:
                            LAG.met(operation.__name__, allocation_id)
                            raise EC2ClientError(
                                "InvalidIPAddress.InUse", f"Address {allocation_id} is in use."
                            )
                instances = instance_views(backend, [i for i in named(self) if i and i.startswith("i-")])
                result = operation(self)
                LAG.wrote(before, views(backend))
                LAG.changed(instances, instance_views(backend, instances))
            return result

        write.__name__ = operation.__name__
        return write

    def describe_addresses(self: ElasticIPAddresses) -> ActionResult:
        seen = LAG.addresses_seen(views(self.ec2_backend)) if LAG.stale_read(self.access_key) else None
        if seen is None:
            return original_describe_addresses(self)
        allocation_ids = self._get_param("AllocationIds", [])
        public_ips = self._get_param("PublicIps", [])
        filters: dict[str, Any] = self._filters_from_querystring()  # (moto types it as str: lists of values)
        missing = [i for i in allocation_ids if i not in seen]
        if missing:
            LAG.met("describe_addresses", missing[0])
            raise EC2ClientError("InvalidAllocationID.NotFound", f"Allocation ID '{missing[0]}' not found.")
        by_ip = {view["PublicIp"]: view for view in seen.values()}
        if any(ip not in by_ip for ip in public_ips):
            raise EC2ClientError("InvalidAddress.NotFound", "Address not found.")
        shown = [
            view
            for view in seen.values()
            if (not allocation_ids or view["AllocationId"] in allocation_ids)
            and (not public_ips or view["PublicIp"] in public_ips)
            and all(_matches(view, name, wanted) for name, wanted in filters.items())
        ]
        return ActionResult({"Addresses": shown})

    def describe_instances(self: InstanceResponse) -> ActionResult:
        if not LAG.stale_read(self.access_key):
            return original_describe_instances(self)
        for instance_id in LAG.young(self._get_param("InstanceIds", [])):
            LAG.met("describe_instances", instance_id)
            raise _not_found(instance_id)
        result = original_describe_instances(self)
        answer: dict[str, Any] = result.result  # type: ignore[assignment]
        kept: list[Reservation] = []
        for reservation in answer["Reservations"]:
            instances = [i for i in reservation.instances if not LAG.young([i.id])]
            if len(instances) < len(reservation.instances):
                LAG.met("describe_instances", reservation.id)
            seen = [(i, LAG.instance_seen(i.id)) for i in instances]
            for instance, view in seen:
                if view is not None:
                    LAG.met("describe_instances", instance.id)
            instances = [i if view is None else _as_seen(i, view) for i, view in seen]
            if not instances:
                continue
            if instances != reservation.instances:
                shown = object.__new__(type(reservation))
                shown.__dict__.update(reservation.__dict__)
                shown.instances = instances
                reservation = shown
            kept.append(reservation)
        return ActionResult({**answer, "Reservations": kept})

    def describe_instance_status(self: InstanceResponse) -> ActionResult:
        if not LAG.stale_read(self.access_key):
            return original_describe_instance_status(self)
        for instance_id in LAG.young(self._get_param("InstanceIds", [])):
            LAG.met("describe_instance_status", instance_id)
            raise _not_found(instance_id)
        result = original_describe_instance_status(self)
        answer: dict[str, Any] = result.result  # type: ignore[assignment]
        statuses = [status for status in answer["InstanceStatuses"] if not LAG.young([status.id])]
        return ActionResult({**answer, "InstanceStatuses": statuses})

    original_run_instances = InstanceBackend.run_instances

    def run_instances(self: InstanceBackend, *args: Any, **kwargs: Any) -> Reservation:
        reservation = original_run_instances(self, *args, **kwargs)
        if LAG.armed:
            LAG.launched(instance.id for instance in reservation.instances)
        return reservation

    def changing(change: Callable[[Instance], InstanceState]) -> Callable[[Instance], InstanceState]:
        """An instance's state change (stop, start, terminate: EC2's own, or an API call's) remembered when the
        lag is armed, with what it did to the addresses (a termination disassociates the instance's)."""

        def changed(self: Instance) -> InstanceState:
            if not LAG.armed:
                return change(self)
            backend = self.ec2_backend
            with _WRITING:
                before, addresses = instance_views(backend, [self.id]), views(backend)
                result = change(self)
                LAG.changed(before, instance_views(backend, [self.id]))
                LAG.wrote(addresses, views(backend))
            return result

        changed.__name__ = change.__name__
        return changed

    for name in ("start", "stop", "terminate"):
        setattr(Instance, name, changing(getattr(Instance, name)))

    original_describe_addresses = ElasticIPAddresses.describe_addresses
    original_describe_instances = InstanceResponse.describe_instances
    original_describe_instance_status = InstanceResponse.describe_instance_status
    ElasticIPAddresses.describe_addresses = describe_addresses  # type: ignore[method-assign]
    InstanceResponse.describe_instances = describe_instances  # type: ignore[method-assign]
    InstanceResponse.describe_instance_status = describe_instance_status  # type: ignore[method-assign]
    InstanceBackend.run_instances = run_instances  # type: ignore[method-assign]
    writes: list[tuple[type, str, Callable[[Any], list[str]]]] = [
        (ElasticIPAddresses, "allocate_address", lambda _: []),
        (
            ElasticIPAddresses,
            "associate_address",
            lambda r: [r._get_param("AllocationId"), r._get_param("InstanceId")],
        ),
        (ElasticIPAddresses, "disassociate_address", lambda r: [r._get_param("AssociationId")]),
        (ElasticIPAddresses, "release_address", lambda r: [r._get_param("AllocationId")]),
        (TagResponse, "create_tags", lambda r: list(r._get_param("Resources", []))),
        (TagResponse, "delete_tags", lambda r: list(r._get_param("Resources", []))),
    ]
    for response, name, named in writes:
        setattr(response, name, writing(getattr(response, name), named))
    setattr(ElasticIPAddresses, _MARKER, True)
