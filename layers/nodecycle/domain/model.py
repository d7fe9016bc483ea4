"""The lifecycle of one Auto Scaling lifecycle action, as nodecycle sees and records it."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from nodecycle.domain.policy import ActionResult

# AWS facts: a lifecycle action times out after its hook's heartbeat timeout unless a heartbeat renews it,
# and never lives longer than 100 heartbeat timeouts or 48 hours, whichever is smaller.
GLOBAL_TIMEOUT_FACTOR = 100
GLOBAL_TIMEOUT_CAP = timedelta(hours=48)


class Transition(StrEnum):
    LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
    TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"

    @property
    def short(self) -> str:
        return "launch" if self is Transition.LAUNCHING else "terminate"

    @classmethod
    def from_short(cls, short: str) -> Transition:
        """``launch`` or ``terminate`` (as in record ids and annotations) -> the transition."""
        for transition in cls:
            if transition.short == short:
                return transition
        raise ValueError(f"{short!r} is neither 'launch' nor 'terminate'")


WARM_POOL = "WarmPool"


class ActionRef(BaseModel):
    """What CompleteLifecycleAction and RecordLifecycleActionHeartbeat need to name one action; events and
    records of an action carry these fields too."""

    model_config = ConfigDict(frozen=True)

    group: str
    hook: str
    instance_id: str
    token: str
    transition: Transition

    @property
    def action(self) -> ActionRef:
        """Just the action's name, whatever else the event or record carries."""
        return ActionRef(
            group=self.group,
            hook=self.hook,
            instance_id=self.instance_id,
            token=self.token,
            transition=self.transition,
        )

    @property
    def record_id(self) -> str:
        return record_id(self.instance_id, self.transition, self.token)


class LifecycleEvent(ActionRef):
    """One lifecycle action, normalized from whichever shape AWS delivered it in."""

    started_at: datetime  # when Auto Scaling started the action: the hook's timers run from here
    origin: str | None = None
    destination: str | None = None
    notification_metadata: str | None = None
    delivery: str  # "eventbridge" or "sqs", for logs only

    @property
    def from_warm_pool(self) -> bool:
        return self.origin == WARM_POOL

    @property
    def into_warm_pool(self) -> bool:
        return self.destination == WARM_POOL


def record_id(instance_id: str, transition: Transition, token: str) -> str:
    """The identity of a lifecycle action: the same action delivered twice maps to the same record."""
    return f"{instance_id}/{transition.short}/{token}"


def parse_record_id(text: str) -> tuple[str, Transition, str]:
    """``record_id``'s inverse: (instance id, transition, token). Raises ValueError for anything else."""
    instance_id, short, token = text.split("/", 2)
    if not instance_id or not token:
        raise ValueError(f"{text!r} is not a lifecycle record id")
    return instance_id, Transition.from_short(short), token


class Step(StrEnum):
    """The steps of a lifecycle, in the order a plan may list them (see :mod:`nodecycle.domain.flow`)."""

    ASSIGN_EIP = "assign-eip"
    READY_GATE = "ready-gate"
    ACQUIRE_SLOT = "acquire-slot"
    CORDON = "cordon"
    EVICT = "evict"  # ...and wait until the pods are gone; then the optional load balancer delay
    RELEASE_EIP = "release-eip"
    COMPLETE = "complete"
    CLEANUP = "cleanup"
    DONE = "done"


class LifecycleRecord(ActionRef):
    """The durable state of one lifecycle action (one DynamoDB item).

    ``seq`` fences the work messages: a message carries the ``seq`` it was sent for, and only a message
    whose ``seq`` matches may run the current step; the commit of a step is conditional on ``seq``, so
    duplicate deliveries collapse into one chain of work.
    """

    id: str
    owner: str
    origin: str | None = None
    destination: str | None = None
    notification_metadata: str | None = None

    plan: tuple[Step, ...]
    step: Step
    seq: int = 0
    attempts: int = 0  # consecutive transient failures of the current step
    resumes: int = 0  # times the sweeper or a redelivery re-sent a lost message

    received_at: datetime
    started_at: datetime
    updated_at: datetime
    due_at: datetime  # when the message for this seq is meant to run

    heartbeat_timeout: int  # seconds, from the hook
    heartbeat_deadline: datetime  # the action times out here unless a heartbeat renews it
    global_deadline: datetime  # the action times out here whatever happens
    heartbeats: int = 0
    # When Auto Scaling confirmed that this token's action is active (before anything was disrupted)
    verified_at: datetime | None = None

    node: str | None = None
    node_uid: str | None = None  # what the node's Events name it by
    zone: str | None = None
    drain_started_at: datetime | None = None
    drain_deadline: datetime | None = None
    # Set while a drain that lost its budget slot waits to get it back: that wait does not count against the
    # drain timeout (the deadline moves on by it when the slot is back).
    drain_paused_at: datetime | None = None
    gate_deadline: datetime | None = None  # launch readiness gate
    forced_at: datetime | None = None
    pods_evicted: int = 0
    slot_waiting_since: datetime | None = None

    allocation_id: str | None = None
    public_ip: str | None = None

    result: ActionResult | None = None  # the result the action is (to be) completed with
    outcome: str | None = None  # why the lifecycle ended as it did, for people
    completed_at: datetime | None = None
    finished_at: datetime | None = None
    last_error: str | None = None

    extra: dict[str, Any] = Field(default_factory=dict)  # step-private scratch space

    @property
    def finished(self) -> bool:
        return self.step is Step.DONE

    @property
    def action_open(self) -> bool:
        """True while the lifecycle action may still need a heartbeat or a completion."""
        return self.completed_at is None and self.outcome != "action-expired" and not self.finished

    def overdue(self, now: datetime, grace: timedelta) -> bool:
        """True when the message for this seq should have run long ago: it was probably lost."""
        return not self.finished and now > self.due_at + grace


def global_deadline(started_at: datetime, heartbeat_timeout: int) -> datetime:
    return started_at + min(timedelta(seconds=heartbeat_timeout * GLOBAL_TIMEOUT_FACTOR), GLOBAL_TIMEOUT_CAP)
