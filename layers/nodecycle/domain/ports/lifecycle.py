"""The lifecycle's ports: the record store, the work queues and the messages on them, Auto Scaling."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from nodecycle.domain.flow import Worker
from nodecycle.domain.model import (
    ADOPTED,
    ActionRef,
    LifecycleRecord,
    Step,
    Transition,
    adopted_token,
    parse_record_id,
)
from nodecycle.domain.policy import ActionResult


class WorkMessage(BaseModel):
    """One unit of work: run the current step of a lifecycle record, if ``seq`` is still current."""

    model_config = ConfigDict(frozen=True)

    record_id: str
    seq: int
    step: Step  # informative: the record is the authority on what runs
    watch: int | None = None  # a watch: resend the step if the record is still at this seq (see engine)
    wake: bool = False  # run the waiting step now, before its due time (a budget slot, or an address in its line, was freed for it)
    # a wake's lifecycle: a record starts over under another token (the next maintenance), which a wake-up
    # meant for the last one must not bring forward
    token: str | None = None
    # When SQS first handed the message to a consumer, on SQS's clock (its ApproximateFirstReceiveTimestamp): set by
    # the receiver from its queue's record, never sent. What tells a message early by design (a wait chained past
    # SQS's 900 s delay limit) from one on time read on a container clock that runs behind (see StepEngine._handle).
    delivered_at: datetime | None = Field(default=None, exclude=True)


@dataclass(frozen=True)
class ActionClaim:
    """Which lifecycle goes on for the current action of an instance under a hook: one per instance,
    transition and hook, beside the records. A record's id names the action by its token, which the sweeper
    does not know when it adopts an action whose event was lost: the two lifecycles of one action (its event's,
    its adoption) would have two records. Each new lifecycle of a hook's action is written with the claim, both
    or neither, and only over the claim it expects: whichever is written second sees the first."""

    lifecycle: str  # the id of its record
    # when its action started; for an adopted one (no API tells an action's start), when it was adopted
    since: datetime

    @classmethod
    def of(cls, record: LifecycleRecord) -> ActionClaim:
        return cls(record.id, record.started_at if record.token_known else record.received_at)

    @property
    def adopted(self) -> bool:
        """Whether the sweeper adopted its lifecycle (see adopted_token)."""
        return (parse_record_id(self.lifecycle)[2] or "").startswith(ADOPTED)


class Claimed(StrEnum):
    """What became of a record written with its action's claim (or ``TokenTaken``: see write_claimed)."""

    WRITTEN = "written"  # both
    RECORD_TAKEN = "record-taken"  # neither: the record exists (or, over a seq, moved on from it)
    CLAIM_TAKEN = "claim-taken"  # neither: the claim is not the one expected


@dataclass(frozen=True)
class TokenTaken:
    """Neither written: the token is another lifecycle's, of another instance or transition (see write_claimed).
    The refusal names its holder as the write met it (DynamoDB returns the item that failed a condition with the
    refusal): intake asks whether that lifecycle is Auto Scaling's without reading it again, and the store keeps
    nothing of it between calls (a warm container's store answered a later question from the last refusal)."""

    holder: (
        str | None
    )  # the id of the record that holds the token; None: none does any more (its item expired)


class RecordStore(Protocol):
    def create(self, record: LifecycleRecord) -> bool:
        """Write a new record; False when a record with this id already exists."""
        ...

    def get(self, record_id: str) -> LifecycleRecord | None: ...

    def commit(self, record: LifecycleRecord, expected_seq: int) -> bool:
        """Replace the record if its stored seq is still ``expected_seq``; False when another delivery won."""
        ...

    def open_records(self, owner: str) -> Iterator[LifecycleRecord]:
        """The unfinished records of ``owner`` (read in pages, for the sweeper and the status command)."""
        ...


class RecordReads(Protocol):
    """The records as a step reads other lifecycles' (the slot's ask, those of its instance's disruptions)."""

    def get(self, record_id: str) -> LifecycleRecord | None: ...

    def get_many(self, record_ids: Collection[str]) -> dict[str, LifecycleRecord]:
        """The records of ``record_ids`` (at most 100) that exist, by id, each read consistently, in one request
        (DynamoDB BatchGetItem) and the requests for what it left unprocessed."""
        ...


class ClaimingRecordStore(RecordStore, Protocol):
    """The record store as intake (and the sweeper's adoption through it) starts a hook's lifecycle."""

    def claim(self, action: ActionRef) -> ActionClaim | None:
        """The claim on the action's instance, transition and hook (read consistently); None when none."""
        ...

    def write_claimed(
        self,
        record: LifecycleRecord,
        expected: ActionClaim | None,
        expected_seq: int | None = None,
        *,
        displacing: str | None = None,
    ) -> Claimed | TokenTaken:
        """Write a hook's lifecycle (a new record; over ``expected_seq`` when given) and make it its action's
        claim (``ActionClaim.of``), both or neither, while the claim is still ``expected`` (None: none).

        A known token (not an adopted lifecycle's) is held for the record in the same write, and the write is
        refused (``TokenTaken``, naming it) when another record holds it: Auto Scaling issues a token for one action of one
        instance, and may take a call's token alone (it does not say it refuses one named with another instance),
        so a second lifecycle of the token under another instance is a message that names the instance with
        another's live token: forged or crossed. Its lifecycle would cordon and drain a node for an action that is
        not its instance's, and end when the token's true lifecycle completes it. ``displacing``: the record that
        holds the token, from which this one takes it (one Auto Scaling does not confirm: see intake)."""
        ...


class IntakeProgress(Protocol):
    """How far intake got through the instances of an event it could not finish in one invocation."""

    def progress(self, key: str) -> int:
        """How many of the event's instances (in their order) were taken in: 0 for an event never cut short."""
        ...

    def save_progress(self, key: str, done: int, at: datetime) -> None:
        """Record that the first ``done`` were taken in, unless a delivery of the event got further."""
        ...


class WorkQueues(Protocol):
    def send(self, worker: Worker, message: WorkMessage, delay_seconds: int = 0) -> None: ...


@dataclass(frozen=True)
class Hook:
    """A lifecycle hook as Auto Scaling describes it: which transition it holds and for how long."""

    transition: Transition  # launching or terminating
    heartbeat_timeout: int  # seconds


@dataclass(frozen=True)
class WaitingInstance:
    """An instance that a group's lifecycle hooks hold (``Pending:Wait`` or ``Terminating:Wait``, and a warm
    pool's own ``Warmed:Pending:Wait`` or ``Warmed:Terminating:Wait``), with its group's tags (what decides
    whether the group is this stack's), and where it comes from and goes to as far as its state tells (as the
    action's event would say: the plan of a move into or out of a warm pool is not a launch's or a drain's)."""

    group: str
    group_tags: Mapping[str, str]
    instance_id: str
    transition: Transition
    origin: str | None = None
    destination: str | None = None

    def action(self, hook: str) -> ActionRef:
        """Its action under ``hook``, named as an adopted one is (no API tells its token: see adopted_token)."""
        return ActionRef(
            group=self.group,
            hook=hook,
            instance_id=self.instance_id,
            token=adopted_token(hook),
            transition=self.transition,
            origin=self.origin,
            destination=self.destination,
        )


@dataclass(frozen=True)
class Membership:
    """Where an instance stands, as Auto Scaling says, else (for one no group lists) as EC2 says: what tells a
    launch action that ended with its instance from one Auto Scaling never had for it (see
    ``engine.instance_left``)."""

    group: str | None  # the group that lists it; else the group EC2 tags it with (aws:autoscaling:groupName)
    lifecycle_state: str | None  # its state in the group that lists it; None: no group lists it
    ec2_state: str | None = None  # for one no group lists: its state in EC2; None: EC2 does not know it


class Autoscaling(Protocol):
    def complete(self, action: ActionRef, result: ActionResult) -> bool:
        """Complete the action; False when it was no longer active (completed before, or timed out)."""
        ...

    def heartbeat(self, action: ActionRef) -> bool:
        """Record a heartbeat; False when the action is no longer active."""
        ...

    def renewed_at(self, now: datetime) -> datetime:
        """When the heartbeat just accepted (``heartbeat``, or ``confirm``'s) renewed its action, on the caller's
        clock as far as it can tell: ``now`` (read before the call), or Auto Scaling's time of its answer when that
        is earlier. Auto Scaling renews an action from when it takes the heartbeat, on its own clock: a caller whose
        clock runs ahead of it, recording its own ``now``, would write a deadline that much later than Auto
        Scaling's, and every run after it, on a clock that is right, would heartbeat that much too late."""
        ...

    def confirm(self, action: ActionRef) -> bool:
        """Record a heartbeat and confirm that the action holds its instance: False when the action is not
        active, or when the instance is not where an action of its transition holds it (the token is another
        instance's); a TransientError while the instance is still on its way into that wait state."""
        ...

    def hook(self, group: str, name: str) -> Hook | None:
        """The group's hook of that name; None when it does not exist."""
        ...

    def group_tags(self, group: str) -> dict[str, str] | None:
        """The group's tags; None when the group does not exist."""
        ...

    def hooks_of(self, group: str) -> dict[str, Hook]:
        """The group's hooks by name (none when the group does not exist)."""
        ...

    def waiting_instances(self, names: tuple[str, ...], owner: str | None) -> list[WaitingInstance]:
        """The instances hooks hold in the groups named, and in those tagged ``nodecycle:owner=<owner>`` (when
        ``owner`` is given): read in pages, not per group or instance."""
        ...

    def activity_started(self, group: str, instance_id: str, since: datetime) -> datetime | None:
        """When ``group`` began what it is doing with the instance now (its unfinished scaling activity that names
        the instance, the latest begun since ``since``): no later than the start of the lifecycle action a hook
        holds the instance by in it, as the group begins a termination before its hooks hold the instance. None
        when it lists none. Read in pages; asked only where no event dated the action (a carried-over
        lifecycle's)."""
        ...

    def lifecycle_state(self, instance_id: str) -> str | None:
        """The instance's lifecycle state in its group (``InService``, ``Terminating:Wait``...); None when
        no group has it (any more)."""
        ...

    def membership(self, instance_id: str) -> Membership:
        """The group that lists the instance and its state there (DescribeAutoScalingInstances); for one no group
        lists, EC2's state and group tag of it (DescribeInstances, asked only then)."""
        ...
