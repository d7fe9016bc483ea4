"""An in-memory EC2 for the EIP steps: the Addresses port, answering as AWS does.

It answers as AWS, not as moto: AssociateAddress with AllowReassociation false refuses an address that is
associated already (``Resource.AlreadyAssociated``) and an instance that is pending or gone
(``InvalidInstanceID``), not one stopped; associating a second address with an instance moves the instance's
first address off it silently; ReleaseAddress refuses an associated address (``InvalidIPAddress.InUse``) in a nondefault
VPC, and with ``default_vpc`` disassociates and releases it without a word, as EC2 does in a default VPC;
there is an address quota (``AddressLimitExceeded``); a terminated instance loses its associations. It can
also lag (DescribeAddresses not showing a new association yet) and fail the next call of a method on request.
"""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from nodecycle.domain.eip.assign import AssignAddress
from nodecycle.domain.eip.line import Held, Line, Refused, Waiter
from nodecycle.domain.eip.locked import Lock, Locks
from nodecycle.domain.engine import Outcome
from nodecycle.domain.model import LifecycleRecord, Step, Transition, global_deadline, record_id
from nodecycle.domain.policy import EipPolicy
from nodecycle.domain.ports.addresses import (
    ALLOCATED_AT_TAG,
    GROUP_TAG,
    INSTANCE_TAG,
    OWNER_TAG,
    POOL_TAG,
    Address,
    AddressAlreadyAssociated,
    AddressInUse,
    AddressLimitExceeded,
    AddressLocked,
    AddressNotFound,
    AddressRefused,
    InstanceUnavailable,
)
from tests.support.fakes import FakeAutoscaling, FakeMetrics, InMemoryRecords

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
OWNER = "stack-a"
GROUP = "ci-runners"
HEARTBEAT = 3600
# The instance states in which AssociateAddress takes an instance: in a VPC a stopped one too (its address stays
# with it while it is stopped); EC2 refuses one pending, shutting down or terminated
ASSOCIABLE = frozenset({"running", "stopping", "stopped"})


@dataclass
class Eip:
    allocation_id: str
    public_ip: str
    tags: dict[str, str]
    association_id: str | None = None
    instance_id: str | None = None
    secondary: bool = False  # on another interface or private IP of its instance than the primary one

    def view(self) -> Address:
        return Address(
            allocation_id=self.allocation_id,
            public_ip=self.public_ip,
            association_id=self.association_id,
            instance_id=self.instance_id,
            tags=dict(self.tags),
            # (an address associated with no instance is on an interface of its own, left behind by default)
            interface_id=f"eni-{self.allocation_id}"
            if self.association_id and not self.instance_id
            else None,
        )


@dataclass
class FakeAddresses:
    eips: dict[str, Eip] = field(default_factory=dict)
    instances: dict[str, str] = field(default_factory=dict)  # instance id -> EC2 state
    # instance id -> its LaunchTime, as EC2 says it: when it was last started (a start out of a stopped or
    # hibernated state moves it); T0 less a day for an instance launched without one
    launched: dict[str, datetime] = field(default_factory=dict)
    quota: int = 5  # AWS's default Elastic IP quota per Region
    lag: int = 0  # DescribeAddresses (describe) hides a new association from this many reads
    # ReleaseAddress refuses (InvalidIPAddress.InUse) this many times right after a DisassociateAddress, as
    # EC2 does until the disassociation has settled
    settling: int = 1
    # ReleaseAddress as in a default VPC: an associated address is disassociated and released, no error
    default_vpc: bool = False
    # addresses AWS locked: ReleaseAddress refuses them (InvalidAddress.Locked), associated or not
    locked: set[str] = field(default_factory=set)
    # network interfaces an AWS service manages (a NAT gateway's) or an instance holds: not left behind
    held_interfaces: set[str] = field(default_factory=set)
    calls: list[str] = field(default_factory=list)
    faults: dict[str, list[Exception]] = field(default_factory=lambda: defaultdict(list))
    # runs once, before (or after) the next call of a method, with that call's arguments
    before: dict[str, Callable[..., object]] = field(default_factory=dict)
    after: dict[str, Callable[..., object]] = field(default_factory=dict)
    _hidden: dict[str, int] = field(default_factory=dict)
    _unsettled: dict[str, int] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    # -- set-up and inspection ---------------------------------------------------------------------

    def launch(self, instance_id: str, state: str = "running", at: datetime = T0 - timedelta(days=1)) -> str:
        self.instances[instance_id] = state
        self.launched[instance_id] = at
        return instance_id

    def start(self, instance_id: str, at: datetime) -> None:
        """As EC2 does: a stopped instance started again runs, its LaunchTime the start's."""
        self.instances[instance_id] = "running"
        self.launched[instance_id] = at

    def terminate(self, instance_id: str) -> None:
        """As EC2 does: the instance's addresses are disassociated when it terminates."""
        self.instances[instance_id] = "terminated"
        for eip in self.eips.values():
            if eip.instance_id == instance_id:
                eip.instance_id = eip.association_id = None

    def add(
        self,
        *,
        owner: str | None = OWNER,
        allocated_for: str | None = None,
        pool: str | None = None,
        allocated_at: datetime | None = T0,
        on: str | None = None,
        secondary: bool = False,
    ) -> str:
        """An address that exists before the test starts, tagged as given (and associated ``on`` an instance,
        on its primary private IP or, ``secondary``, on another)."""
        tags = {OWNER_TAG: owner, INSTANCE_TAG: allocated_for, POOL_TAG: pool, GROUP_TAG: GROUP}
        if allocated_at is not None:
            tags[ALLOCATED_AT_TAG] = allocated_at.isoformat()
        eip = self._new({key: value for key, value in tags.items() if value is not None})
        if on is not None:
            self.take(eip.allocation_id, on)
            eip.secondary = secondary
        return eip.allocation_id

    def take(self, allocation_id: str, instance_id: str) -> None:
        """Someone associates the address behind the step's back (another launch, another tool)."""
        eip = self.eips[allocation_id]
        eip.instance_id, eip.association_id, eip.secondary = instance_id, self._id("eipassoc"), False

    def on(self, instance_id: str) -> list[Eip]:
        return [eip for eip in self.eips.values() if eip.instance_id == instance_id]

    def count(self, method: str) -> int:
        return self.calls.count(method)

    # -- the port ----------------------------------------------------------------------------------

    def find(
        self,
        owner: str,
        *,
        instance_id: str | None = None,
        allocated_for: str | None = None,
        pool: str | None = None,
    ) -> list[Address]:
        self._call("find")
        wanted = {OWNER_TAG: owner, INSTANCE_TAG: allocated_for, POOL_TAG: pool}
        found = [
            eip.view()
            for eip in self.eips.values()
            if all(value is None or eip.tags.get(key) == value for key, value in wanted.items())
            and (instance_id is None or eip.instance_id == instance_id)
        ]
        self._done("find", owner)
        return found

    def on_primary_ip(self, instance_id: str) -> list[Address]:
        self._call("on_primary_ip", instance_id)
        return [eip.view() for eip in self.on(instance_id) if not eip.secondary]

    def describe(self, allocation_id: str) -> Address:
        self._call("describe", allocation_id)
        eip = self._eip(allocation_id)
        if self._hidden.get(allocation_id, 0) > 0:
            self._hidden[allocation_id] -= 1
            return Address(allocation_id=eip.allocation_id, public_ip=eip.public_ip, tags=dict(eip.tags))
        return eip.view()

    def allocate(self, tags: Mapping[str, str]) -> Address:
        self._call("allocate", tags)
        if len(self.eips) >= self.quota:
            raise AddressLimitExceeded("AddressLimitExceeded")
        return self._new(dict(tags)).view()

    def associate(self, allocation_id: str, instance_id: str) -> str:
        self._call("associate", allocation_id, instance_id)
        eip = self._eip(allocation_id)
        if self.instances.get(instance_id) not in ASSOCIABLE:
            raise InstanceUnavailable(
                f"InvalidInstanceID: {instance_id} is {self.instances.get(instance_id)}"
            )
        if eip.association_id is not None:
            raise AddressAlreadyAssociated(f"Resource.AlreadyAssociated: {eip.public_ip}")
        for other in self.on(instance_id):  # the instance's primary private IP takes the new one instead
            if not other.secondary:
                other.instance_id = other.association_id = None
        eip.instance_id, eip.association_id = instance_id, self._id("eipassoc")
        self._hidden[allocation_id] = self.lag
        return eip.association_id

    def disassociate(self, association_id: str) -> bool:
        self._call("disassociate", association_id)
        for eip in self.eips.values():
            if eip.association_id == association_id:
                eip.instance_id = eip.association_id = None
                self._unsettled[eip.allocation_id] = self.settling
                self._done("disassociate", association_id)
                return True
        return False

    def release(self, allocation_id: str) -> bool:
        self._call("release", allocation_id)
        eip = self.eips.get(allocation_id)
        if eip is None:
            return False
        if allocation_id in self.locked:
            raise AddressLocked(f"InvalidAddress.Locked: {eip.public_ip}")
        if eip.association_id is not None and not self.default_vpc:
            raise AddressInUse(f"InvalidIPAddress.InUse: {eip.public_ip}")
        if self._unsettled.get(allocation_id, 0) > 0:
            self._unsettled[allocation_id] -= 1
            raise AddressInUse(f"InvalidIPAddress.InUse: {eip.public_ip} (its disassociation is settling)")
        del self.eips[allocation_id]
        return True

    def instance_states(self, instance_ids: Collection[str]) -> dict[str, str]:
        self._call("instance_states", instance_ids)
        return {instance: self.instances[instance] for instance in instance_ids if instance in self.instances}

    def left_behind(self, interface_ids: Collection[str]) -> set[str]:
        self._call("left_behind", interface_ids)
        # As EC2's DescribeNetworkInterfaces filtered by id: an interface it no longer has is not in the answer
        # (an address's association went with it), so it is not left behind either
        known = {interface for eip in self.eips.values() if (interface := eip.view().interface_id)}
        return (set(interface_ids) & known) - self.held_interfaces

    def launched_at(self, instance_id: str) -> datetime | None:
        self._call("launched_at", instance_id)
        return self.launched.get(instance_id)

    def launch_state(self, instance_id: str) -> tuple[str, datetime | None] | None:
        self._call("launch_state", instance_id)
        state = self.instances.get(instance_id)
        return None if state is None else (state, self.launched.get(instance_id))

    # -- plumbing ----------------------------------------------------------------------------------

    def _call(self, method: str, *args: object) -> None:
        self.calls.append(method)
        hook = self.before.pop(method, None)
        if hook is not None:
            hook(*args)
        if self.faults[method]:
            raise self.faults[method].pop(0)

    def _done(self, method: str, *args: object) -> None:
        hook = self.after.pop(method, None)
        if hook is not None:
            hook(*args)

    def _eip(self, allocation_id: str) -> Eip:
        eip = self.eips.get(allocation_id)
        if eip is None:
            raise AddressNotFound(f"InvalidAllocationID.NotFound: {allocation_id}")
        return eip

    def _new(self, tags: dict[str, str]) -> Eip:
        number = next(self._ids)
        eip = Eip(allocation_id=f"eipalloc-{number:04d}", public_ip=f"198.51.100.{number}", tags=tags)
        self.eips[eip.allocation_id] = eip
        return eip

    def _id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids):04d}"


@dataclass
class FakeLines:
    """The lines' store as DynamoDB keeps them: a write lands only over the version it read."""

    lines: dict[str, Line] = field(default_factory=dict)
    reads: int = 0
    writes: int = 0
    # a write of another writer that lands right before the next write of this one (a lost race)
    racing: list[Sequence[Waiter]] = field(default_factory=list)
    taken: dict[str, str] = field(default_factory=dict)  # run -> the address its deliveries take
    holds: dict[tuple[str, str], Held] = field(default_factory=dict)  # (owner, instance) -> its pool address
    refused: dict[str, Refused] = field(default_factory=dict)  # line -> addresses refused, to whom, when
    locked: dict[str, Locks] = field(default_factory=dict)  # owner -> the addresses AWS locked, remembered

    def read(self, key: str) -> Line:
        self.reads += 1
        return self.lines.get(key, Line())

    def write(self, key: str, waiters: Sequence[Waiter], expected_version: int) -> bool:
        self.writes += 1
        current = self.lines.get(key, Line())
        if self.racing:
            current = Line(tuple(self.racing.pop(0)), current.version + 1)
            self.lines[key] = current
        if current.version != expected_version:
            return False
        self.lines[key] = Line(tuple(waiters), expected_version + 1)
        return True

    def taking(self, run: str, allocation_id: str, instead_of: str | None) -> str:
        written = self.taken.get(run)
        if written is None or written == instead_of:
            self.taken[run] = allocation_id
            return allocation_id
        return written

    def hold(self, owner: str, instance_id: str, held: Held) -> None:
        self.holds[(owner, instance_id)] = held

    def held(self, owner: str, instance_id: str) -> Held | None:
        return self.holds.get((owner, instance_id))

    def refusals(self, key: str) -> Refused:
        return self.refused.get(key, Refused(by={}))

    def keep_refusals(
        self, key: str, refused: Mapping[tuple[str, str], datetime], expected_version: int
    ) -> bool:
        if self.refusals(key).version != expected_version:
            return False
        self.refused[key] = Refused(by=dict(refused), version=expected_version + 1)
        return True

    def locks(self, owner: str) -> Locks:
        self.reads += 1
        return self.locked.get(owner, Locks())

    def keep_locks(self, owner: str, locks: Mapping[str, Lock], expected_version: int) -> bool:
        self.writes += 1
        if self.locked.get(owner, Locks()).version != expected_version:
            return False
        self.locked[owner] = Locks(by=dict(locks), version=expected_version + 1)
        return True

    def waiting(self) -> list[str]:
        return [waiter.instance_id for line in self.lines.values() for waiter in line.waiters]


@dataclass
class Wiring:
    """What the eip function wires ASSIGN_EIP with besides EC2 (nodecycle.wiring.eip): the lifecycle records and
    the pools' lines."""

    records: InMemoryRecords = field(default_factory=InMemoryRecords)
    lines: FakeLines = field(default_factory=FakeLines)
    groups: FakeAutoscaling = field(default_factory=FakeAutoscaling)  # (its states: where instances are)

    def assign(self, ec2: FakeAddresses, metrics: FakeMetrics, policy: EipPolicy) -> AsTheEngineRuns:
        step = AssignAddress(
            owner=OWNER,
            policy=policy,
            addresses=ec2,
            metrics=metrics,
            lines=self.lines,
            records=self.records,
            groups=self.groups,
            refusals=self.lines,
        )
        return AsTheEngineRuns(step, self.records)


@dataclass
class AsTheEngineRuns:
    """ASSIGN_EIP run as the engine runs it: on the launch's record as stored (the engine reads it from the table
    and runs the step on it), and what the step decided committed to it, so that each launch in a pool's line
    has its record, at its step, for the launches behind it to look up."""

    step: AssignAddress
    records: InMemoryRecords

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        self._store(record)
        outcome = self.step(record, now)
        changed = record.model_copy(update=dict(outcome.changes))
        if not outcome.again:
            following = record.plan[record.plan.index(record.step) + 1]
            changed = changed.model_copy(update={"step": outcome.then or following})
        self._store(changed)
        return outcome

    def _store(self, record: LifecycleRecord) -> None:
        stored = self.records.get(record.id)
        if stored is None:
            assert self.records.create(record)
        else:
            assert self.records.commit(record.model_copy(update={"seq": stored.seq}), stored.seq)


def lifecycle(
    instance_id: str, transition: Transition, plan: tuple[Step, ...], at: datetime = T0, **changes: object
) -> LifecycleRecord:
    """A lifecycle action that started ``at``, with the hook's heartbeat timeout ahead of it."""
    token = str(uuid.uuid5(uuid.NAMESPACE_OID, f"{instance_id}/{transition.short}"))  # tokens are UUIDs
    record = LifecycleRecord(
        id=record_id(instance_id, transition, token),
        owner=OWNER,
        instance_id=instance_id,
        transition=transition,
        token=token,
        group=GROUP,
        hook=transition.short,
        plan=plan,
        step=plan[0],
        received_at=at,
        started_at=at,
        updated_at=at,
        due_at=at,
        heartbeat_timeout=HEARTBEAT,
        heartbeat_deadline=at + timedelta(seconds=HEARTBEAT),
        global_deadline=global_deadline(at, HEARTBEAT),
    )
    return record.model_copy(update=changes)


def state_change_record(instance_id: str, at: datetime = T0, **changes: object) -> LifecycleRecord:
    """An instance EC2 told was stopped ``at``, outside the group's hooks, at its RELEASE_EIP: a lifecycle
    without a hook (nothing to verify, nothing to complete), as intake writes it."""
    plan = (Step.FORGET_NODE, Step.RELEASE_EIP, Step.DONE)
    no_hook = {"hook": "", "heartbeat_timeout": 0, "heartbeat_deadline": at, "global_deadline": at}
    changes = {"step": Step.RELEASE_EIP, **no_hook, **changes}
    return lifecycle(instance_id, Transition.STATE_CHANGE, plan, at, **changes)


def launch_record(instance_id: str, at: datetime = T0, **changes: object) -> LifecycleRecord:
    plan = (Step.ASSIGN_EIP, Step.READY_GATE, Step.COMPLETE, Step.DONE)
    # the engine confirmed the action with Auto Scaling before ASSIGN_EIP (its own tests show it)
    changes = {"verified_at": at, **changes}
    return lifecycle(instance_id, Transition.LAUNCHING, plan, at, **changes)


def terminate_record(instance_id: str, at: datetime = T0, **changes: object) -> LifecycleRecord:
    plan = (
        Step.ACQUIRE_SLOT,
        Step.CORDON,
        Step.EVICT,
        Step.RELEASE_EIP,
        Step.COMPLETE,
        Step.CLEANUP,
        Step.DONE,
    )
    # at RELEASE_EIP after a drain: the drain's first step confirmed the action with Auto Scaling
    changes = {"step": Step.RELEASE_EIP, "verified_at": at, **changes}
    return lifecycle(instance_id, Transition.TERMINATING, plan, at, **changes)


def refusing(
    ec2: FakeAddresses,
    refused: Collection[str],
    code: str,
    *,
    to: str | None = None,
    times: int | None = None,
) -> list[str]:
    """EC2 refuses to associate the addresses ``refused`` (every one: ``"*"`` in it), answering ``code`` (a
    denial by a condition on their tags: ``UnauthorizedOperation``); only to instance ``to`` when given, only the
    first ``times`` such calls when given. The allocation ids tried (by ``to`` when given), in order."""
    tried: list[str] = []
    left = [times]
    associate = ec2.associate

    def refuse(allocation_id: str, instance_id: str) -> str:
        if to not in (None, instance_id):
            return associate(allocation_id, instance_id)
        tried.append(allocation_id)
        if (allocation_id in refused or "*" in refused) and (left[0] is None or left[0] > 0):
            left[0] = None if left[0] is None else left[0] - 1
            raise AddressRefused(f"{code}: You are not authorized to perform this operation.")
        return associate(allocation_id, instance_id)

    ec2.associate = refuse  # type: ignore[method-assign]
    return tried
