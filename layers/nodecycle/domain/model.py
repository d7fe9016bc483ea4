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
    """What happens to an instance: the two transitions of Auto Scaling's lifecycle hooks, and the
    disruptions nobody chose (EC2 and AWS Health tell of them; no hook waits for them)."""

    LAUNCHING = "autoscaling:EC2_INSTANCE_LAUNCHING"
    TERMINATING = "autoscaling:EC2_INSTANCE_TERMINATING"
    SPOT_INTERRUPTION = "ec2:SPOT_INSTANCE_INTERRUPTION"  # EC2 reclaims the capacity in two minutes
    REBALANCE = "ec2:INSTANCE_REBALANCE_RECOMMENDATION"  # a Spot instance at elevated risk of interruption
    SCHEDULED_CHANGE = "health:EC2_SCHEDULED_CHANGE"  # maintenance (reboot, stop, retirement) scheduled ahead
    STATE_CHANGE = "ec2:INSTANCE_STATE_CHANGE"  # stopped or terminated outside the group's hooks

    @property
    def short(self) -> str:
        return _SHORT[self]

    @property
    def has_hook(self) -> bool:
        """A lifecycle hook's transition: there is an action to heartbeat and to complete."""
        return self in (Transition.LAUNCHING, Transition.TERMINATING)

    @classmethod
    def from_short(cls, short: str) -> Transition:
        """``launch``, ``terminate``, ``spot-interruption``... (as in record ids and annotations) -> the transition."""
        for transition, name in _SHORT.items():
            if name == short:
                return transition
        raise ValueError(f"{short!r} names no transition ({', '.join(_SHORT.values())})")


_SHORT = {
    Transition.LAUNCHING: "launch",
    Transition.TERMINATING: "terminate",
    Transition.SPOT_INTERRUPTION: "spot-interruption",
    Transition.REBALANCE: "rebalance",
    Transition.SCHEDULED_CHANGE: "scheduled-change",
    Transition.STATE_CHANGE: "state-change",
}


WARM_POOL = "WarmPool"
# The group itself as an action's origin or destination. A terminating action that both leaves from it and goes back
# to it holds an instance refresh's root volume replacement (strategy ReplaceRootVolume), in its own wait state
# (ReplacingRootVolume:Wait): AWS's event carries Origin and Destination "AutoScalingGroup" with Action
# "ReplaceRootVolume" ("Instance refresh replace root volume lifecycle events", Amazon EC2 Auto Scaling user guide).
# The instance stays, with its network interfaces and addresses, and reboots on its new root volume; its launch
# hooks hold it again in Pending:Wait once the volume is replaced.
GROUP = "AutoScalingGroup"


EC2 = "EC2"  # an action's origin for a launch (from EC2), its destination for a termination (back to EC2)

# The move an action makes (origin, destination, as its EventBridge event says them) where the lifecycle state its hook
# holds the instance in tells it, and it is not a plain launch or termination: a hook's notification to an SQS queue
# or SNS topic need not say Origin and Destination (AWS's message example for both has neither field: "Configure a
# notification target for lifecycle notifications", Amazon EC2 Auto Scaling user guide). Taken as a plain termination,
# a root volume replacement's action was refused at its confirmation (its instance waits in ReplacingRootVolume:Wait,
# not Terminating:Wait) and its node went undrained into the reboot; a warm pool's moves likewise. Keyed by the state
# without its ":Wait" (a state read may lag the notification by a moment). A launch out of the warm pool waits in
# Pending:Wait as a new instance does: the state cannot tell it.
_MOVES_BY_STATE: dict[tuple[Transition, str], tuple[str, str]] = {
    (Transition.TERMINATING, "ReplacingRootVolume"): (GROUP, GROUP),
    (Transition.TERMINATING, "Warmed:Terminating"): (WARM_POOL, EC2),
    (Transition.TERMINATING, "Warmed:Pending"): (GROUP, WARM_POOL),  # scaled in back to the pool
    (Transition.LAUNCHING, "Warmed:Pending"): (EC2, WARM_POOL),
}


def move_told_by_state(transition: Transition, state: str | None) -> tuple[str, str] | None:
    """The (origin, destination) of an action of ``transition`` holding an instance in lifecycle state ``state``,
    where the state tells one (see _MOVES_BY_STATE); None otherwise."""
    if state is None:
        return None
    return _MOVES_BY_STATE.get((transition, state.removesuffix(":Wait")))


class ActionRef(BaseModel):
    """What CompleteLifecycleAction and RecordLifecycleActionHeartbeat need to name one action; events and
    records of an action carry these fields too."""

    model_config = ConfigDict(frozen=True)

    group: str
    hook: str
    instance_id: str
    token: str
    transition: Transition
    # Where the instance comes from and goes to, as the action's event says (EC2, AutoScalingGroup, WarmPool),
    # or as the instance's state told when the action was adopted: an action named by instance id alone is
    # only the one the hook holds while the instance is still in the state this action holds it in
    origin: str | None = None
    destination: str | None = None

    @property
    def action(self) -> ActionRef:
        """Just the action's name, whatever else the event or record carries."""
        return ActionRef(
            group=self.group,
            hook=self.hook,
            instance_id=self.instance_id,
            token=self.token,
            transition=self.transition,
            origin=self.origin,
            destination=self.destination,
        )

    @property
    def record_id(self) -> str:
        return record_id(self.instance_id, self.transition, self.token)

    @property
    def token_known(self) -> bool:
        """False for a lifecycle the sweeper adopted: Auto Scaling names its action by instance id alone."""
        return not self.token.startswith(ADOPTED)

    @property
    def replaces_root_volume(self) -> bool:
        """A terminating action out of the group and back into it: an instance refresh replacing the instance's
        root volume (see GROUP). Its node is drained as for a termination, but the instance comes back."""
        return (
            self.transition is Transition.TERMINATING and self.origin == GROUP and self.destination == GROUP
        )

    @property
    def back_from_root_volume_replacement(self) -> bool:
        """A launching action out of the group and back into it: the instance whose root volume was just replaced,
        rebooted on its new volume, held by the launch hooks before it is in service again (see GROUP)."""
        return self.transition is Transition.LAUNCHING and self.origin == GROUP and self.destination == GROUP


# The token of a lifecycle the sweeper adopted (see nodecycle.domain.sweep.orphans): an action whose event never
# became a record. No Auto Scaling API tells an action's token; CompleteLifecycleAction and
# RecordLifecycleActionHeartbeat take the instance id instead. One per instance, transition and hook (a later
# action of the instance under the hook starts over on it); a late event of the action finds its lifecycle by
# the action's claim (see nodecycle.domain.ports.lifecycle.ActionClaim).
ADOPTED = "adopted:"


def adopted_token(hook: str) -> str:
    return ADOPTED + hook


class LifecycleEvent(ActionRef):
    """One lifecycle action, normalized from whichever shape AWS delivered it in."""

    started_at: datetime  # when Auto Scaling started the action: the hook's timers run from here
    notification_metadata: str | None = None
    delivery: str  # "eventbridge" or "sqs", for logs only

    @property
    def from_warm_pool(self) -> bool:
        return self.origin == WARM_POOL

    @property
    def into_warm_pool(self) -> bool:
        return self.destination == WARM_POOL


def record_id(instance_id: str, transition: Transition, token: str) -> str:
    """The identity of a lifecycle: the same action delivered twice maps to the same record. A disruption
    without a hook has one record per instance and cause (a Spot interruption is told once or twice, a
    rebalance recommendation again and again): its token, the event's id, is not part of it."""
    if not transition.has_hook:
        return f"{instance_id}/{transition.short}"
    return f"{instance_id}/{transition.short}/{token}"


# Longer than any id ``record_id`` makes (an instance id, a transition, and a token: a UUID, an event's id of at
# most 128 characters, or ``adopted:`` and a hook's name of at most 255), and short enough for a table key
# (DynamoDB refuses one over 2,048 bytes, a refusal that no retry changes).
RECORD_ID_MAX = 512


def parse_record_id(text: str) -> tuple[str, Transition, str | None]:
    """``record_id``'s inverse: (instance id, transition, token, None for a disruption without a hook).
    Raises ValueError for anything else."""
    if len(text) > RECORD_ID_MAX:
        raise ValueError(f"{text[:100]!r}... ({len(text)} characters) is not a lifecycle record id")
    parts = text.split("/", 2)
    if len(parts) < 2:
        raise ValueError(f"{text!r} is not a lifecycle record id")
    instance_id, short, *rest = parts
    transition = Transition.from_short(short)
    token = rest[0] if rest else None
    if not instance_id or (token is None) == transition.has_hook or token == "":
        raise ValueError(f"{text!r} is not a lifecycle record id")
    return instance_id, transition, token


class DisruptionEvent(BaseModel):
    """A disruption without a hook (a Spot interruption warning, a rebalance recommendation, scheduled
    maintenance, an instance stopped or terminated outside the hooks), normalized from its event."""

    # defer_build: built at the first disruption taken in, not at each cold start (the eip and drain functions
    # never make one; most intake invocations take in lifecycle actions)
    model_config = ConfigDict(frozen=True, defer_build=True)

    instance_id: str
    cause: Transition  # one of the transitions without a hook
    event_id: str  # the event's id: the record's token
    happened_at: datetime  # when EC2 (or AWS Health) told of it
    strikes_at: datetime  # when the instance goes: the interruption, the maintenance's start
    state: str | None = None  # for a state change: the instance's new state
    # for a Spot interruption: what EC2 does to the instance (its warning's instance-action): terminate, or stop or
    # hibernate (a persistent request's instance, which EC2 starts again when capacity comes back)
    spot_action: str | None = None
    delivery: str
    replay: str | None = None  # the name of the EventBridge archive replay that sent it again, if one did
    # scheduled maintenance: the starts of every maintenance EC2 lists for the instance (confirmed by EC2)
    listed: tuple[datetime, ...] = ()
    # scheduled maintenance: EC2's code of it (instance-retirement, system-reboot...), as its Health event's type
    # tells; None for a type that names none
    code: str | None = None

    @property
    def record_id(self) -> str:
        return record_id(self.instance_id, self.cause, self.event_id)


# record.extra key: the lifecycle that starts on this record when this one is done (another maintenance of the
# instance, told of while this one waited or drained), as the record it will be (JSON)
SUCCESSOR = "successor"
# record.extra key: the starts of the maintenances the record's earlier lifecycles were for (ISO times). AWS Health
# sends an event again, under a new id, whenever it updates it: such an update of one of them, while a later one's
# lifecycle runs on the record, tells of nothing new.
DONE_STARTS = "done_starts"
# record.extra key: the last drain of the node an earlier lifecycle on the record made, for a maintenance before
# this one's ({"node", "node_uid", "zone", "drain_started_at"}): the node stays cordoned and empty after it, and a
# terminate hook of the instance goes on from it while this lifecycle has not begun a drain of its own
EARLIER_DRAIN = "earlier_drain"
# record.extra key (and fields of the in-progress annotation): what nodecycle itself set on the node when it
# claimed it, {"cordon": bool, "lb": bool}; a node that comes back gets only those undone, never an operator's
# cordon or a node group's own load balancer exclusion
SET_ON_NODE = "set_on_node"
# record.extra key: what the lifecycles before this one on the record set on the node and left there for it (the
# next maintenance of the instance, which began before the one before it was over): SET_ON_NODE's form. Its
# claim of the node takes them over, so that its cleanup lifts them once its own maintenance is over.
KEPT_ON_NODE = "kept_on_node"
# record.extra key of a maintenance's lifecycle: the tokens it went by before its maintenance was moved earlier (intake's
# _rescheduled gives it the earlier maintenance's event id, in place, while it waits in line or drains). Its claim of
# the node, and its budget entries, name the token it had when they were written: still this lifecycle's (see
# LifecycleRecord.goes_by), not those of a lifecycle over on the record.
TOKENS_BEFORE = "tokens_before"
# The mark a maintenance's successor adds to its event id when the lifecycle before it on the record went by that id
# (see LifecycleRecord.followed_by): two lifecycles of one record never share a token.
FOLLOWING = "/next"
# record.extra key of a maintenance's lifecycle: EC2 listed the maintenance as the instance's scheduled event when
# intake took it in (DescribeInstanceStatus). Listed then and no more at its drain's due time, it was called off (or
# carried out): its drain does not begin (see drain.acquire). Absent: EC2 did not list it yet (it may lag AWS Health).
MAINTENANCE_LISTED = "maintenance_listed"
# record.extra key of a state-change lifecycle: the state EC2 told of (stopping, stopped, shutting-down, terminated).
# EC2 tells of each stop and termination twice; the second is the same disruption (see intake).
INSTANCE_STATE = "instance_state"
# record.extra key of a Spot interruption's lifecycle whose warning said EC2 stops or hibernates the instance (its
# instance-action), not terminates it: EC2 starts it again when capacity comes back, and the node the drain left
# cordoned is uncordoned then (see drain.cleanup). Absent for a termination.
SPOT_ACTION = "spot_action"
RESUMING_SPOT_ACTIONS = frozenset({"stop", "hibernate"})
# record.extra key of such a lifecycle at its cleanup: since when it watches for the instance started again, the node
# left cordoned and marked released for it (see drain.cleanup). The next interruption of the instance, once it runs
# again, starts over on the record then, as after a finished lifecycle, taking that cordon over (KEPT_ON_NODE).
SPOT_WATCH = "spot_watch"
# record.extra key of a state-change lifecycle that a terminate lifecycle wrote over as it completed its action
# (that lifecycle's id): its own steps free everything the instance held, and EC2's state changes of the
# termination, which follow every termination, start nothing
ENDED_BY = "ended_by"
# record.extra key of the terminate lifecycle that wrote it: its cleanup frees what the state change's lifecycle
# would have (this owner's other entries of the instance in the budget, another lifecycle's annotations)
ENDS_ITS_INSTANCE = "ends_its_instance"
# record.extra key of a lifecycle whose RELEASE_EIP left addresses to the sweeper (EC2 kept them in use to its last
# attempt, or refused): a terminate lifecycle does not write its instance's state-change lifecycle over then,
# whose release after the termination finds them free at once
ADDRESSES_LEFT = "addresses_left"
# record.extra key: the action was no longer active when this lifecycle came to complete it (completed by an
# earlier delivery, timed out, or never Auto Scaling's)
SETTLED_ELSEWHERE = "settled_elsewhere"
# record.extra key of a terminate lifecycle carried over to the action its instance's hook holds (the token it was
# taken in under, whose action ended while the hook still held its instance under another: a message that named
# the instance with another's token; see drain.cleanup): its action is named by the instance from then on, as an
# adopted one's is. The token it was taken in under.
CARRIED_OVER = "carried_over"
# record.extra key of a terminate lifecycle whose action was found gone while its drain may still be carried over
# (see ``may_carry_over``): its expiry is told by the cleanup's commit that decides it, as an expiry
# (LifecycleActionsExpired: the alarm) when nothing is carried over, as LifecycleActionsCarriedOver when the hook
# still holds the instance under the action the drain goes on for. Told when the action was found gone, the
# crossed lifecycle paged for an action that was not lost (the instance's own, completed by its carry-over).
EXPIRY_UNTOLD = "expiry_untold"


class Step(StrEnum):
    """The steps of a lifecycle, in the order a plan may list them (see :mod:`nodecycle.domain.flow`)."""

    ASSIGN_EIP = "assign-eip"
    READY_GATE = "ready-gate"
    ACQUIRE_SLOT = "acquire-slot"
    CORDON = "cordon"  # (a rebalance recommendation's cordon-only plan finds the node here)
    EVICT = "evict"  # ...and wait until the pods are gone; then the optional load balancer delay
    # a disruption without a hook that already happened (stopped, terminated): free the node's slot and
    # clear its annotations at once (the address goes with RELEASE_EIP)
    FORGET_NODE = "forget-node"
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
    notification_metadata: str | None = None

    plan: tuple[Step, ...]
    step: Step
    seq: int = 0
    attempts: int = 0  # consecutive failures of the current step (throttled or refused): its backoff
    # Of those, the refused ones (AccessDenied): they alone fail the step's message after so many, so that a
    # throttling storm before a refusal does not make it the last one allowed
    refusals: int = 0
    resumes: int = 0  # times the sweeper or a redelivery re-sent a lost message

    received_at: datetime
    started_at: datetime
    updated_at: datetime
    due_at: datetime  # when the message for this seq is meant to run

    heartbeat_timeout: int  # seconds, from the hook
    heartbeat_deadline: datetime  # the action times out here unless a heartbeat renews it
    global_deadline: datetime  # the action times out here whatever happens
    heartbeats: int = 0
    # A heartbeat failed (throttled): the next is not asked before this, however often the step runs meanwhile
    heartbeat_retry_at: datetime | None = None
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
    def state_change_id(self) -> str:
        """The id of the record of its instance's state changes (a stop, a termination outside the hooks), which
        the terminate lifecycle that ends the instance writes over (ENDED_BY)."""
        return record_id(self.instance_id, Transition.STATE_CHANGE, "")

    def written_over_by(self, lifecycle_id: str) -> bool:
        """Whether this state-change record is the one lifecycle ``lifecycle_id`` wrote over as it ended its
        instance (see ``completion.ended_by``)."""
        return self.extra.get(ENDED_BY) == lifecycle_id

    @property
    def action(self) -> ActionRef:
        """The action's name; by its instance alone once the lifecycle was carried over (CARRIED_OVER)."""
        named = super().action
        if self.extra.get(CARRIED_OVER):
            return named.model_copy(update={"token": adopted_token(self.hook)})
        return named

    @property
    def action_confirmed(self) -> bool:
        """Whether Auto Scaling ever showed this lifecycle's action to be its own: a heartbeat it accepted before
        a disruptive step, or the completion it accepted. Not so for an action completed (or found gone) before
        any such step ran, by the engine's guard or the sweeper near its global timeout, when Auto Scaling said
        it holds no such action: forged, replayed, or timed out before it was taken in."""
        return self.verified_at is not None or (
            self.completed_at is not None and not self.extra.get(SETTLED_ELSEWHERE)
        )

    @property
    def action_open(self) -> bool:
        """True while the lifecycle action may still need a heartbeat or a completion (a disruption without
        a hook has no action). Not past an action found gone (expired) or that Auto Scaling never had with this
        token (unknown: a stale or forged message): counted open, a lifecycle still at its cleanup would hide
        the instance's true action from the sweeper's orphan keep-alive and adoption."""
        return (
            self.transition.has_hook
            and self.completed_at is None
            and self.outcome not in ("action-expired", "unknown-action")
            and not self.finished
        )

    def renewed(self, now: datetime, **changes: Any) -> LifecycleRecord:
        """The record after a heartbeat Auto Scaling accepted at ``now``: its deadline a heartbeat timeout
        away (never past the global timeout), one more heartbeat counted."""
        deadline = min(now + timedelta(seconds=self.heartbeat_timeout), self.global_deadline)
        return self.model_copy(
            update={
                "heartbeat_deadline": deadline,
                "heartbeats": self.heartbeats + 1,
                "heartbeat_retry_at": None,
                **changes,
            }
        )

    @property
    def done_starts(self) -> frozenset[datetime]:
        """The starts of the maintenances earlier lifecycles on this record were for (DONE_STARTS)."""
        return frozenset(datetime.fromisoformat(str(at)) for at in self.extra.get(DONE_STARTS) or ())

    def goes_by(self, token: object) -> bool:
        """Whether ``token`` (as a node's claim or a budget entry names it) is this lifecycle's: its token, or one it
        went by before its maintenance was moved earlier (TOKENS_BEFORE). Another is the token of a lifecycle before
        it on the record (one record per instance and cause: the next maintenance starts over on it under its own)."""
        before = self.extra.get(TOKENS_BEFORE)
        return token == self.token or (isinstance(before, list) and token in before)

    @property
    def successor(self) -> LifecycleRecord | None:
        """The lifecycle that starts on this record once this one is done (SUCCESSOR), as it will be; None: none."""
        found = self.extra.get(SUCCESSOR)
        return LifecycleRecord.model_validate(found) if isinstance(found, dict) else None

    def followed_by(self, later: LifecycleRecord) -> LifecycleRecord:
        """``later``, the lifecycle that starts on this record once this one is over (the next maintenance of
        the instance), knowing what the lifecycles before it were for."""
        if self.transition is Transition.SPOT_INTERRUPTION:
            # (a Spot instance stopped by its interruption and started again, interrupted again while the watch for
            # its start had not yet lifted the cordon this lifecycle kept: the next one takes that cordon over)
            kept = self.extra.get(SET_ON_NODE) if self.extra.get(SPOT_WATCH) else None
            if isinstance(kept, dict):
                return later.model_copy(update={"extra": {**later.extra, KEPT_ON_NODE: kept}})
            return later
        if self.transition is not Transition.SCHEDULED_CHANGE:
            return later
        # (a maintenance this lifecycle was moved earlier from follows it under the event id this one had then,
        # which its claim of the node and its budget entries may name still, left by a release given up: the
        # successor goes by a token of its own, so those read as this lifecycle's, over, not as the successor's)
        token = later.token
        while self.goes_by(token):
            token = f"{token}{FOLLOWING}"
        starts = sorted({*self.done_starts, self.global_deadline} - {later.global_deadline})
        extra = {**later.extra, DONE_STARTS: [at.isoformat() for at in starts]}
        drained = self.extra.get(EARLIER_DRAIN)
        if self.drain_started_at is not None and Step.EVICT in self.plan:
            drained = {
                "node": self.node,
                "node_uid": self.node_uid,
                "zone": self.zone,
                "drain_started_at": self.drain_started_at.isoformat(),
            }
        if isinstance(drained, dict):
            extra[EARLIER_DRAIN] = drained
        kept = self.extra.get(SET_ON_NODE) if self.drain_started_at is not None else None
        kept = kept or self.extra.get(KEPT_ON_NODE)
        if isinstance(kept, dict):
            extra[KEPT_ON_NODE] = kept
        return later.model_copy(update={"token": token, "extra": extra})

    def overdue(self, now: datetime, grace: timedelta) -> bool:
        """True when the message for this seq should have run long ago: it was probably lost."""
        return not self.finished and now > self.due_at + grace


def may_carry_over(record: LifecycleRecord) -> bool:
    """Whether ``record``'s drain may be carried over to the action its instance's hook holds once its own action
    is found gone (see drain.cleanup ``_carried_over``, which also asks the node and Auto Scaling): a terminate
    lifecycle that began its drain and was not carried over before (once only)."""
    return (
        record.transition is Transition.TERMINATING
        and not record.extra.get(CARRIED_OVER)
        and record.drain_started_at is not None
        and Step.EVICT in record.plan
    )


def global_deadline(started_at: datetime, heartbeat_timeout: int) -> datetime:
    return started_at + min(timedelta(seconds=heartbeat_timeout * GLOBAL_TIMEOUT_FACTOR), GLOBAL_TIMEOUT_CAP)
