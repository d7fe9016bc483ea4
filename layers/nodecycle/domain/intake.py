"""Intake: turn one lifecycle event into a durable record and its first unit of work."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from enum import StrEnum

from nodecycle.domain.catalog import OWNER_TAG, LifecycleHooks, ManagedGroups
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.errors import TransientError
from nodecycle.domain.flow import disruption_plan, plan_for
from nodecycle.domain.model import (
    CARRIED_OVER,
    ENDED_BY,
    INSTANCE_STATE,
    MAINTENANCE_LISTED,
    RESUMING_SPOT_ACTIONS,
    SPOT_ACTION,
    SPOT_WATCH,
    SUCCESSOR,
    TOKENS_BEFORE,
    DisruptionEvent,
    LifecycleEvent,
    LifecycleRecord,
    Step,
    Transition,
    adopted_token,
    global_deadline,
    move_told_by_state,
    parse_record_id,
    record_id,
)
from nodecycle.domain.policy import PlanPolicy, maintenance_next_run
from nodecycle.domain.ports.instances import (
    DOWN_STATES,
    GONE_STATES,
    InstanceDirectory,
    InstanceFacts,
    ScheduledEvent,
)
from nodecycle.domain.ports.lifecycle import (
    ActionClaim,
    Autoscaling,
    Claimed,
    ClaimingRecordStore,
    TokenTaken,
    WaitingInstance,
    WorkQueues,
)
from nodecycle.domain.ports.runtime import Clock, Metrics

log = logging.getLogger(__name__)

# The oldest a rebalance recommendation can be when it is delivered: EventBridge retries it for 2 minutes (the
# rule's RetryPolicy), then Lambda keeps an asynchronous event for at most 6 hours (its maximum event age: the
# intake function's, left at its default, which is also the most it can be). One older was not delivered but
# sent again (an archive's replay), and no EC2 API can say whether the instance is still at risk.
REBALANCE_MAX_AGE = timedelta(hours=6, minutes=5)
# How far ahead of this function's clock an event's time can be without a word: AWS's clocks and Lambda's agree
# within this (a start told further ahead is still timed from now, see Intake.accept)
_SKEW = timedelta(seconds=1)
# Writes of a hook's lifecycle, each after another lifecycle's claim on its action came in between: two writers
# (its event's intake, the sweeper) make one retry at most; a third ends in a TransientError (retried later).
CLAIM_ATTEMPTS = 3
# Writes of a disruption's record tried in a row, each after its item was gone at the read that followed the one
# before (deleted by the table's TTL meanwhile), before a retry later
STORE_ATTEMPTS = 3
# How long after a disruption EC2 may still not list its instance: EC2's API is eventually consistent, and an
# instance launched moments ago answers InvalidInstanceID.NotFound for a while (usually under a second, seconds
# under load), while a Spot interruption or a rebalance recommendation can come for it at once. Intake looks
# again until this long after the disruption's time (see Intake._listed_late), then refuses it as unknown.
LISTING_LAG = timedelta(seconds=5)
# The lifecycle states of an instance no terminate action's default result leaves it in: its group's, in
# service or on its way there (a terminate that timed out goes on to Terminating:Proceed, or back to a warm pool)
_NOT_TERMINATED = ("InService", "Pending", "Standby", "EnteringStandby")
# The pauses between those looks, in seconds (the last one repeated)
_LOOKS_AGAIN = (0.25, 0.5, 1.0, 2.0)
# Where a root volume replacement's terminate hooks hold its instance (see ``_timed_out_so``)
_HELD_FOR_A_REPLACEMENT = "ReplacingRootVolume:Wait"
# How near a Health event's start is to EC2's of the same maintenance, whatever their codes say: the same instant
# (EC2's own, told by Health), to a clock's rounding. Further apart, only a listed event of the Health event's code is
# its maintenance (moved, see _described); one of another kind is another maintenance.
SAME_START = timedelta(minutes=15)


class IntakeOutcome(StrEnum):
    ACCEPTED = "accepted"  # a new record and its first message
    DUPLICATE = "duplicate"  # the action is known: nothing written, nothing sent
    RESENT = "resent"  # the action is known but its first message was lost: sent again
    UNMANAGED = "unmanaged"  # not a group (or hook) of this stack
    IGNORED = "ignored"  # a disruption this stack has nothing to do for (its settings, its parts)
    UNKNOWN_INSTANCE = "unknown-instance"  # EC2 does not know the instance of a disruption
    UNCONFIRMED = "unconfirmed"  # a disruption that came by the queue and EC2 does not confirm
    REPLAYED = "replayed"  # a disruption an EventBridge archive sent again
    UNKNOWN_HOOK = "unknown-hook"  # the hook no longer exists, so neither does the action
    WRONG_HOOK = "wrong-hook"  # the event's transition is not its hook's: forged or broken
    TOKEN_CONFLICT = "token-conflict"  # the token was taken in under another group or hook: forged or broken
    EXPIRED = "expired"  # delivered after the action's global timeout
    ADOPTED = "adopted"  # the sweeper adopted the action before its event came: nothing written, nothing sent


def _described(scheduled: list[ScheduledEvent], starts: datetime, code: str | None) -> datetime | None:
    """The start, as EC2 lists it, of the maintenance a Health event that says ``starts`` (of EC2's event code
    ``code``, when its type tells one) tells of: the one starting nearest to it (the earlier of two as near) among
    those of its code, or starting within SAME_START of it. An instance may have several (a reboot in hours, a
    retirement in days), each told by a Health event of its own: timing each by the earliest would make the
    later one's event a duplicate of the first, never drained for. Not the first at or after ``starts``: a
    Health start a few seconds past EC2's would skip to the next maintenance, and an older version of one EC2
    moved (a move keeps its code) would find none. None when EC2 lists none of them: a maintenance EC2 has not
    listed yet, which another of the instance, of another kind and days away, must not time (its event would be
    taken for a duplicate of that one's, and nothing drained for it)."""
    candidates = [
        e.not_before
        for e in scheduled
        if code is None or e.code == code or abs(e.not_before - starts) <= SAME_START
    ]
    return min(candidates, key=lambda at: (abs(at - starts), at), default=None)


def _noted(event: DisruptionEvent) -> dict[str, object]:
    """What a disruption's record notes of its event: a state change's new state; a Spot interruption's action
    when EC2 stops or hibernates the instance rather than terminating it (its cleanup then uncordons the node once
    EC2 has started the instance again); that EC2 lists a maintenance as the instance's (its drain does not begin
    once EC2 lists it no more: called off)."""
    if event.state is not None:
        return {INSTANCE_STATE: event.state}
    if event.cause is Transition.SCHEDULED_CHANGE and event.strikes_at in event.listed:
        return {MAINTENANCE_LISTED: True}
    if event.cause is Transition.SPOT_INTERRUPTION and event.spot_action in RESUMING_SPOT_ACTIONS:
        return {SPOT_ACTION: event.spot_action}
    return {}


def _with_successor(record: LifecycleRecord, later: LifecycleRecord) -> LifecycleRecord | None:
    """``record`` with the lifecycle ``later`` among its successors, in the order of their starts; None when
    one of that start is there already."""
    found = record.extra.get(SUCCESSOR)
    successor = record.successor
    if successor is not None and later.global_deadline == successor.global_deadline:
        return None
    if successor is None or later.global_deadline < successor.global_deadline:
        if successor is not None:
            later = later.model_copy(update={"extra": {**later.extra, SUCCESSOR: found}})
        chained: LifecycleRecord | None = later
    else:
        chained = _with_successor(successor, later)
    if chained is None:
        return None
    return record.model_copy(update={"extra": {**record.extra, SUCCESSOR: chained.model_dump(mode="json")}})


class Intake:
    def __init__(
        self,
        *,
        owner: str,
        plan: PlanPolicy,
        records: ClaimingRecordStore,
        queues: WorkQueues,
        groups: ManagedGroups,
        hooks: LifecycleHooks,
        autoscaling: Autoscaling,
        clock: Clock,
        metrics: Metrics,
        resume_grace: timedelta,
        retry_window: timedelta,
        min_heartbeat: timedelta | None = None,
        instances: InstanceDirectory | None = None,
        adopt_after: timedelta = timedelta(0),
        pause: Callable[[float], None] | None = None,
        listing_lag: timedelta = LISTING_LAG,
    ) -> None:
        """``pause``: sleeps for the seconds given, while intake waits for EC2 to list an instance (see
        ``_listed_late``); None: it does not wait."""
        self._owner = owner
        self._pause = pause
        self._listing_lag = listing_lag
        self._adopt_after = adopt_after
        self._min_heartbeat = retry_window if min_heartbeat is None else min_heartbeat
        self._instances = instances
        self._plan = plan
        self._retry_window = retry_window
        self._records = records
        self._groups = groups
        self._hooks = hooks
        self._autoscaling = autoscaling
        self._clock = clock
        self._metrics = metrics
        self._resume_grace = resume_grace
        # (a lifecycle's first message, and the watch of one that may be lost, as the engine sends them)
        self._dispatch = Dispatcher(records=records, queues=queues, clock=clock, metrics=metrics)

    def accept(self, event: LifecycleEvent) -> IntakeOutcome:
        if not self._groups.manages(event.group, event.hook, started=event.started_at):
            log.debug("ignored: group %s / hook %s is not managed by this stack", event.group, event.hook)
            self._metrics.count("LifecycleActionsIgnored")
            return IntakeOutcome.UNMANAGED

        self._metrics.count("LifecycleActionsReceived", transition=event.transition.short)
        hook = self._hooks.get(event.group, event.hook)
        if hook is not None and hook.transition is not event.transition:
            # before refusing: a hook recreated under its name for the other transition within the cache's ttl
            hook = self._hooks.get(event.group, event.hook, fresh=True)
        if (hook is None or hook.transition is not event.transition) and self._hooks.read_before(
            event.group, event.hook, min(event.started_at, self._clock.now())
        ):
            # The answer was read before the action started (the ttl's, or a flood used the fresh reads up): the
            # hook may have been created, or recreated for this transition, since. Retried rather than dropped:
            # at its redelivery (once the ttl is past: its retry_after) the answer is read again after
            # the action's start and is final, so a forged message dated now costs one receive more, no loop.
            raise TransientError(
                f"lifecycle hook {event.hook} of group {event.group} read here before its action started, as "
                f"{'absent' if hook is None else hook.transition.short}: retried, to be read again",
                # (its retry comes once the answer is past its ttl: sooner, this container would give it again)
                retry_after=self._hooks.read_again_in(event.group, event.hook),
            )
        if hook is None:
            log.warning("dropped: lifecycle hook %s of group %s does not exist", event.hook, event.group)
            self._metrics.count("LifecycleEventsRejected", reason="unknown-hook")
            return IntakeOutcome.UNKNOWN_HOOK
        if hook.transition is not event.transition:
            # A hook holds one transition. An event naming a terminate hook as a launch would plan a
            # completion with CONTINUE, and with the token of a terminating instance's action Auto Scaling
            # would accept it: the instance would go undrained. Only a forged or broken message says so.
            log.warning(
                "dropped: the event says %s but hook %s of group %s holds %s",
                event.transition.short,
                event.hook,
                event.group,
                hook.transition.short,
            )
            self._metrics.count("LifecycleEventsRejected", reason="wrong-hook")
            return IntakeOutcome.WRONG_HOOK
        timeout = hook.heartbeat_timeout

        needed = int(self._min_heartbeat.total_seconds())
        if timeout < needed:
            log.warning(
                "hook %s has a heartbeat timeout of %d s, under the %d s these settings need (the heartbeat "
                "margin plus a crashed step's retry, or how far apart two sweeps may heartbeat it): a crash near a "
                "heartbeat deadline, or a stalled queue between two sweeps, can let the action time out; "
                "raise it",
                event.hook,
                timeout,
                needed,
            )
        now = self._clock.now()
        if event.started_at > now:
            # No action starts after it is told of: a start still to come is a message's own (by the queue,
            # forged or edited), and a lifecycle timed from it would heartbeat after Auto Scaling's deadlines (the
            # action timing out mid-drain) and hold its claim as newer than the true event's. Timed from now,
            # its deadlines are no later than the action's.
            if event.started_at - now > _SKEW:
                log.warning(
                    "the event says its action started at %s, ahead of now: timed from now", event.started_at
                )
            event = event.model_copy(update={"started_at": now})
        record = self._new_record(self._placed(event), timeout, now)
        if now > record.global_deadline:
            told = self._taken_in_before(record) if record.token_known else None
            if told is not None:
                return told
            log.warning("dropped: delivered after the action's global timeout (%s)", record.global_deadline)
            self._metrics.count("LifecycleEventsRejected", reason="expired")
            return IntakeOutcome.EXPIRED
        record, lapsed = self._keep_alive(record, now)
        return self._store(record, now, lapsed=lapsed)

    def _placed(self, event: LifecycleEvent) -> LifecycleEvent:
        """``event``, with the move its instance's lifecycle state tells when it says neither Origin nor Destination
        (a hook's notification to a queue or topic need not: see ``move_told_by_state``). The lifecycle's plan and its
        confirmation follow the move: a root volume replacement keeps its instance's address, and its action holds
        the instance in ReplacingRootVolume:Wait, where a termination's confirmation would refuse it. One
        DescribeAutoScalingInstances, for such an event only; its confirmation still checks the state and the token,
        so a message that names a move it does not make is refused there as before."""
        if event.origin is not None or event.destination is not None:
            return event
        move = move_told_by_state(event.transition, self._autoscaling.lifecycle_state(event.instance_id))
        if move is None:
            return event
        origin, destination = move
        log.info(
            "the event says neither origin nor destination; instance %s waits where an action from %s to %s "
            "holds it: taken as such",
            event.instance_id,
            origin,
            destination,
        )
        return event.model_copy(update={"origin": origin, "destination": destination})

    def _taken_in_before(self, record: LifecycleRecord) -> IntakeOutcome | None:
        """What an event delivered after its action's global timeout is when a lifecycle took the action in (its
        event by the other path, or the sweeper's adoption): a duplicate, as before that timeout, not an expired
        event (rejected: RejectedEventsAlarm, which says the queue stalled). None when none did. Its record
        tells, or, once the table's TTL deleted the finished record, its claim (kept a TTL past the global
        timeout): the event's own lifecycle's, or one the sweeper adopted while the action could be open. Read for
        such late events only (a redrive of the dead-letter queue hours later, an archive's replay)."""
        known = self._records.get(record.id)
        claim = None if known is not None else self._records.claim(record)
        if known is None and (
            claim is None
            or (
                claim.lifecycle != record.id
                # (an adoption while this action could be open: one since its global timeout is of a later action)
                and not (claim.adopted and record.started_at <= claim.since <= record.global_deadline)
            )
        ):
            return None
        log.info(
            "duplicate delivery, after its global timeout (%s), of a lifecycle action taken in as %s: nothing to do",
            record.global_deadline,
            record.id if claim is None else claim.lifecycle,
        )
        self._metrics.count("LifecycleEventsDuplicate")
        return IntakeOutcome.ADOPTED if claim is not None and claim.adopted else IntakeOutcome.DUPLICATE

    def adopt(self, waiting: WaitingInstance, hook: str, since: datetime) -> IntakeOutcome:
        """Start the lifecycle of an action whose event never became a record (intake failed for all its
        retries, or the event was never delivered): the sweeper found ``waiting`` held by ``hook`` with no
        record, since ``since`` at the latest. The same path as its event's, under a token of its own (see
        ``adopted_token``): the same record and first step, and its action's claim, which a late event of it
        finds (as the adoption finds the claim of a lifecycle its event started since the sweep listed them)."""
        return self.accept(
            LifecycleEvent(
                **waiting.action(hook).model_dump(),  # (its origin and destination with it)
                started_at=since,
                delivery="sweeper",
            )
        )

    def look_up(self, events: Sequence[DisruptionEvent]) -> Mapping[str, InstanceFacts] | None:
        """EC2's facts of the instances of an event that names several (AWS Health's), read together: one call
        per 200 instances rather than one each, most of them often another stack's. None for one instance,
        which ``accept_disruption`` looks up when it comes to it."""
        if self._instances is None or len(events) < 2:
            return None
        return self._instances.facts_of([event.instance_id for event in events])

    def accept_disruption(
        self, event: DisruptionEvent, looked_up: Mapping[str, InstanceFacts] | None = None
    ) -> IntakeOutcome:
        """A disruption without a hook: an instance of a managed group (or carrying this owner's tag) gets a
        lifecycle record of its own, one per instance and cause, planned by what the stack does. ``looked_up``:
        the facts ``look_up`` read for its event (an instance not among them is one EC2 does not know)."""
        if self._instances is None:
            raise RuntimeError("intake of disruptions needs the instance directory")
        if event.cause is Transition.STATE_CHANGE and self._told_already(event):
            return IntakeOutcome.DUPLICATE
        if looked_up is None:
            facts = self._instances.facts(event.instance_id)
        else:
            facts = looked_up.get(event.instance_id)
        if facts is None:
            facts = self._listed_late(event)
        if facts is None and event.cause is Transition.STATE_CHANGE:
            facts = self._forgotten(event)
            if facts is None:
                return IntakeOutcome.UNMANAGED
        if facts is None:
            log.warning("dropped: EC2 does not know instance %s (%s)", event.instance_id, event.cause.short)
            self._metrics.count("LifecycleEventsRejected", reason="unknown-instance")
            return IntakeOutcome.UNKNOWN_INSTANCE
        if not self._ours(facts):
            tagged = facts.tags.get(OWNER_TAG)
            log.debug(
                "ignored: instance %s is %s",
                event.instance_id,
                f"tagged for owner {tagged}" if tagged is not None else "not of a group this stack manages",
            )
            self._metrics.count("LifecycleActionsIgnored")
            return IntakeOutcome.UNMANAGED
        self._metrics.count("DisruptionsReceived", cause=event.cause.short)
        event = self._not_ahead(event)
        if event.replay is not None:
            # An archive's replay sends AWS's events again with their old times, days or months later: what they
            # told of is over or was acted on then, and a rebalance recommendation, which nothing confirms,
            # would drain a node for nothing. (A replayed lifecycle action is checked with Auto Scaling.)
            log.warning(
                "dropped (replayed): a %s of %s sent at %s, sent again by replay %s",
                event.cause.short,
                event.instance_id,
                event.happened_at,
                event.replay,
            )
            self._metrics.count("LifecycleEventsRejected", reason="replayed")
            return IntakeOutcome.REPLAYED
        by_queue = event.delivery != "eventbridge"
        confirmed = self._confirmed(event, facts, by_queue)
        if confirmed is None:
            # Only AWS can put an event with an aws.* source on EventBridge; anyone allowed to send to the
            # intake queue can send its shape. Disrupt nothing EC2 does not confirm. What EC2 can confirm is
            # checked whichever way it came: a true event can come late (Lambda retries an event for hours),
            # when the instance runs again, and freeing its slot or address then would take them from a live
            # node, or draining it would take a slot from the nodes that need one.
            reason = "unconfirmed" if by_queue else "stale"
            log.warning(
                "dropped (%s): a %s of %s came by %s and EC2 does not confirm it (its state: %s)",
                reason,
                event.cause.short,
                event.instance_id,
                "the queue" if by_queue else "EventBridge",
                facts.state,
            )
            self._metrics.count("LifecycleEventsRejected", reason=reason)
            return IntakeOutcome.UNCONFIRMED
        event = confirmed
        plan = disruption_plan(event, self._plan)
        if not plan:
            log.info("%s of %s: nothing for this stack to do", event.cause.short, event.instance_id)
            return IntakeOutcome.IGNORED
        now = self._clock.now()
        due = now
        if event.cause is Transition.SCHEDULED_CHANGE:  # drained a lead time before the maintenance
            due = self._drain_due(event.strikes_at, now)
        record = LifecycleRecord(
            id=event.record_id,
            owner=self._owner,
            instance_id=event.instance_id,
            transition=event.cause,
            token=event.event_id,
            group=facts.group or "",
            hook="",  # no hook waits for it
            plan=plan,
            step=plan[0],
            received_at=now,
            started_at=event.happened_at,
            updated_at=now,
            due_at=due,
            heartbeat_timeout=0,
            heartbeat_deadline=event.strikes_at,
            global_deadline=event.strikes_at,
            extra=_noted(event),
        )
        return self._store(record, now, listed=event.listed)

    def _not_ahead(self, event: DisruptionEvent) -> DisruptionEvent:
        """``event`` timed from now when it says it happened later (beyond the clocks' skew): no disruption is
        told of before it happens, so that time is a message's own (by the queue, forged or edited). Timed from
        it, a Spot interruption's drain would take the deadline as hours away (no precedence in the budget's
        line, evictions a PodDisruptionBudget blocks waited for as if there were time), and the true warning,
        minutes later, would be a duplicate of it: the instance reclaimed two minutes after, undrained. What
        follows from the event's time follows it back (a Spot interruption's two minutes, a state change's
        moment); maintenance starts when AWS Health, and then EC2, say, whenever the event was sent. (Done
        after EC2 is asked: a time ahead waits for no listing, see ``_listed_late``.)"""
        now = self._clock.now()
        ahead = event.happened_at - now
        if ahead <= _SKEW:
            return event
        log.warning(
            "the %s event of %s says it happened at %s, ahead of now: timed from now",
            event.cause.short,
            event.instance_id,
            event.happened_at,
        )
        update: dict[str, object] = {"happened_at": now}
        if event.cause is not Transition.SCHEDULED_CHANGE:
            update["strikes_at"] = event.strikes_at - ahead
        return event.model_copy(update=update)

    def _listed_late(self, event: DisruptionEvent) -> InstanceFacts | None:
        """EC2's facts of the instance of ``event``, which EC2 did not list, when it lists it by LISTING_LAG
        after the event's time (EC2's reads are eventually consistent: an instance launched moments ago is not
        listed for a while, and its Spot interruption or rebalance recommendation is real all the same); None
        when it does not. Waited out here rather than by failing the record: the queue would bring it back a
        visibility timeout later (three minutes, past a Spot interruption's two), Lambda's retry of an
        EventBridge delivery a minute later at the soonest.

        The wait ends at the event's time plus the lag, not the lag from now: an event delivered late waits
        for nothing (EC2 has caught up), and the forged disruptions of ids that never existed, however many
        in a batch, cost one wait of the invocation at most (a time said to be ahead of AWS's clocks, none)."""
        assert self._instances is not None
        now = self._clock.now()
        if self._pause is None or event.happened_at - now > _SKEW:
            return None
        until = min(event.happened_at, now) + self._listing_lag
        for attempt in range(1_000):
            left = (until - self._clock.now()).total_seconds()
            if left <= 0:
                break
            self._pause(min(_LOOKS_AGAIN[min(attempt, len(_LOOKS_AGAIN) - 1)], left))
            facts = self._instances.facts(event.instance_id)
            if facts is not None:
                log.info(
                    "EC2 lists instance %s %.1f s after it did not",
                    event.instance_id,
                    (self._clock.now() - now).total_seconds(),
                )
                return facts
        return None

    def _forgotten(self, event: DisruptionEvent) -> InstanceFacts | None:
        """The facts of the instance of a state change that EC2 no longer describes, when a record of this stack
        names it (a disruption's, of any cause: the instance was this stack's, and is gone now); None, told as
        another's, when none does. EC2 describes a terminated instance for a while only (DescribeInstances:
        "usually less than one hour"), and never another account's: a state change that comes later (Lambda's
        retries of a backlog, a dead-letter queue redriven) names an instance that is gone, and its rule takes in
        every instance of the account and region. Rejected, each paged (RejectedEventsAlarm), as many as the account
        terminated during the backlog, nearly all of them never this stack's. This stack's own is gone (a stop told
        late is of an instance terminated since): its lifecycle frees what it held at once, as for a termination
        EC2 confirms. (One this stack took in only through its hooks has no such record: the sweeper frees what it
        held, its budget entry once EC2 no longer lists it alive, its address past the sweep grace.)"""
        for cause in Transition:
            if cause.has_hook:
                continue
            known = self._records.get(record_id(event.instance_id, cause, event.event_id))
            if known is not None and known.owner == self._owner:
                log.info(
                    "%s of %s, which EC2 no longer describes: gone, and this stack's (its %s record)",
                    event.state,
                    event.instance_id,
                    cause.short,
                )
                tags = {} if known.group else {OWNER_TAG: self._owner}  # (one of no group: tagged for it)
                return InstanceFacts(
                    instance_id=event.instance_id,
                    state="terminated",
                    group=known.group or None,
                    tags=tags,
                    spot_request=None,
                )
        log.info(
            "acknowledged: %s of %s, which EC2 no longer describes and no record of this stack names: another's, "
            "told late",
            event.state,
            event.instance_id,
        )
        self._metrics.count("LifecycleActionsIgnored")
        return None

    def _told_already(self, event: DisruptionEvent) -> bool:
        """Whether the record of the instance's state changes tells of the stop or termination ``event`` tells
        of, over: read before EC2 is asked, since EC2 tells of every stop and termination twice, and of every
        termination through the hooks too (whose lifecycle wrote this record over: ENDED_BY). One read then, rather
        than EC2's description, a refused write and a read. (A forged event that names such an instance does
        nothing either way.)"""
        known = self._records.get(event.record_id)
        if (
            known is None
            or not known.finished
            or _another_state_change(known, event.event_id, event.state, event.happened_at)
        ):
            return False
        ended_by = known.extra.get(ENDED_BY)
        log.info(
            "%s of %s: told of already (%s)",
            event.state,
            event.instance_id,
            f"ended through its terminate hook by lifecycle {ended_by}"
            if ended_by
            else f"event {known.token}",
        )
        self._metrics.count("LifecycleEventsDuplicate")
        return True

    def _ours(self, facts: InstanceFacts) -> bool:
        # The instance's own owner tag decides, when it has one: an instance tagged for another owner is that
        # owner's even in a group this stack names (as a group tagged for another owner is that owner's), or
        # both stacks would take its disruption in and drain its node, under two budgets
        tagged = facts.tags.get(OWNER_TAG)
        if tagged is not None:
            return tagged == self._owner
        return facts.group is not None and self._groups.manages_group(facts.group)

    def _confirmed(
        self, event: DisruptionEvent, facts: InstanceFacts, by_queue: bool
    ) -> DisruptionEvent | None:
        """The event as EC2 itself confirms it; None when EC2 does not (instances is set: see
        accept_disruption)."""
        assert self._instances is not None
        if event.cause is Transition.STATE_CHANGE:
            if facts.state not in DOWN_STATES:
                return None
            # Its record notes the message's state only where EC2 agrees whether the instance is gone or
            # stopped: a message that says "terminated" of an instance that is stopped would make its later stops
            # look like the same disruption (see _another_state_change)
            if (event.state in GONE_STATES) != (facts.state in GONE_STATES):
                return event.model_copy(update={"state": facts.state})
            return event
        if event.cause is Transition.SPOT_INTERRUPTION:
            if not by_queue and self._clock.now() <= event.strikes_at:
                # AWS's own, in time: acted on at once, the two minutes are short, and the Spot request's status
                # may lag the warning. A late one is checked like any other.
                return event
            noticed = facts.spot_request is not None and self._instances.spot_interruption_noticed(
                facts.spot_request
            )
            return event if noticed else None
        if event.cause is Transition.SCHEDULED_CHANGE:
            # The maintenance is EC2's: its start is when EC2 says, not the message (which may be forged, or
            # an older version of a rescheduled event).
            scheduled = self._instances.scheduled_events(event.instance_id)
            if not scheduled:
                # By EventBridge the event is AWS's own: EC2's list may lag it, and draining ahead of a
                # maintenance called off costs less than none ahead of one that comes. By the queue, no; nor
                # one whose start has passed (Health tells of a maintenance again when it is over, and EC2
                # lists it as completed or canceled then, or no more).
                return None if by_queue or event.strikes_at <= self._clock.now() else event
            listed = tuple(sorted({e.not_before for e in scheduled}))
            starts = _described(scheduled, event.strikes_at, event.code)
            if starts is None:
                # EC2 lists other maintenance of the instance, not this one (yet): as above, its own start; the
                # listed starts let it follow the one a lifecycle waits for (see _queued)
                if by_queue or event.strikes_at <= self._clock.now():
                    return None
                return event.model_copy(update={"listed": listed})
            if starts != event.strikes_at:
                log.info(
                    "maintenance of %s starts at %s by EC2 (the event said %s)",
                    event.instance_id,
                    starts,
                    event.strikes_at,
                )
            return event.model_copy(update={"strikes_at": starts, "listed": listed})
        # No EC2 API confirms a rebalance recommendation: it comes by EventBridge or not at all, and no later
        # than a delivery can be.
        if by_queue or self._clock.now() - event.happened_at > REBALANCE_MAX_AGE:
            return None
        return event

    def _store(
        self,
        record: LifecycleRecord,
        now: datetime,
        *,
        listed: tuple[datetime, ...] = (),
        lapsed: bool = False,
    ) -> IntakeOutcome:
        """``lapsed``: a hook's action that Auto Scaling no longer held when its event came, after its heartbeat
        deadline (see ``_keep_alive``)."""
        if record.transition.has_hook:
            return self._store_action(record, now, lapsed=lapsed)
        for _ in range(STORE_ATTEMPTS):
            if self._records.create(record):
                self._send_first(record)
                log.info("accepted %s; first step %s", record.transition.short, record.step)
                return IntakeOutcome.ACCEPTED
            known = self._records.get(record.id)
            if known is None:
                # The record the write met is gone by the read: the table's TTL deleted it (nothing else deletes
                # one), a lifecycle of the instance long over. DynamoDB deletes an expired item at a moment of its
                # own, days after its expiry, and meanwhile a write meets it: written again, not taken for a
                # duplicate (a stop, a Spot interruption of the instance, left undrained)
                continue
            if not ((known.finished or _resting(known)) and self._anew(known, record)):
                break
            # One record per instance and cause: an instance stopped once (its lifecycle long over) and
            # stopped or terminated again later is a new disruption, not a duplicate; so is maintenance EC2
            # schedules after the last one was drained for, and a Spot instance restarted after an interruption
            # and interrupted again. Its lifecycle starts
            # over under the new event, on the next seq (so a late message of the old one is stale).
            restarted = known.followed_by(record).model_copy(update={"seq": known.seq + 1})
            if self._records.commit(restarted, expected_seq=known.seq):
                self._send_first(restarted)
                log.info(
                    "accepted a new %s of a known instance; first step %s",
                    record.transition.short,
                    record.step,
                )
                return IntakeOutcome.ACCEPTED
            known = self._records.get(record.id)  # another delivery restarted it first
            if known is not None:
                break
            # (or the table's TTL deleted the finished record between its read and the write over it: see above)
        else:
            raise TransientError(
                f"the {record.transition.short} record of {record.instance_id} was gone at each of {STORE_ATTEMPTS} "
                "reads after a write that met it"
            )
        if (
            known is not None
            and not known.finished
            and record.global_deadline not in known.done_starts
            and (self._rescheduled(known, record, now, listed) or self._queued(known, record, now, listed))
        ):
            return IntakeOutcome.ACCEPTED
        return self._known(known, now, moved=known is not None and _moved_by(known, record))

    def _store_action(self, record: LifecycleRecord, now: datetime, *, lapsed: bool = False) -> IntakeOutcome:
        """A hook's lifecycle, written with its action's claim (see ActionClaim): one lifecycle goes on for one
        action, whichever of its event's and the sweeper's adoption is written first. Each retry follows a
        claim that another lifecycle wrote since it was read. ``lapsed``: see ``_store``."""
        if record.token_known and self._adopted_without_claim(record, now):
            return IntakeOutcome.ADOPTED
        expected = None if record.token_known else self._records.claim(record)
        displacing: str | None = (
            None  # a lifecycle that holds the token and is not Auto Scaling's (_token_taken)
        )
        for _ in range(CLAIM_ATTEMPTS):
            if lapsed and self._records.get(record.id) is None:
                # (a lifecycle of the action may have ended since, and its record expired: its claim tells)
                return self._claimed(record, self._records.claim(record)) or self._timed_out(record, now)
            claimed = self._claimed(record, expected)
            if claimed is not None:
                return claimed
            written, stored = self._write_action(record, expected, displacing)
            if written is Claimed.WRITTEN:
                self._send_first(stored)
                log.info("accepted %s; first step %s", stored.transition.short, stored.step)
                return IntakeOutcome.ACCEPTED
            if isinstance(written, TokenTaken):
                rejected, displacing = self._token_taken(record, written.holder)
                if rejected is not None:
                    return rejected
                continue  # (written again, taking the token from that lifecycle)
            if written is Claimed.RECORD_TAKEN:
                known = self._records.get(record.id)
                # (an adopted lifecycle's id names its hook, and its instance has one group at a time)
                if record.token_known and known is not None and _told_otherwise(known, record):
                    return self._conflicting(known, record)
                return self._known(known, now)
            expected = self._records.claim(record)
        raise TransientError(
            f"the claim of the {record.transition.short} action of {record.instance_id} under hook {record.hook} "
            f"changed {CLAIM_ATTEMPTS} times while its lifecycle was written"
        )

    def _token_taken(
        self, record: LifecycleRecord, holder: str | None
    ) -> tuple[IntakeOutcome | None, str | None]:
        """``record``, whose token another lifecycle holds (``holder``, as its refused write met it; None: none by now):
        one of another instance (or transition). Auto Scaling issues a token for one action of one instance, so one of
        the two messages names its instance with the other's token: forged, or crossed. An Auto Scaling that takes a
        call's token alone (AWS does not say it refuses one named with another instance) confirms both while both
        instances wait where a terminate holds them; taken in, this one's lifecycle took a slot for its instance's node
        and cordoned it for an action that is not its instance's, and, that action over, its cleanup cleared the node's
        claim and gave the slot back with the node left cordoned while its instance's own action was open (seed 94).
        Rejected, as a token named otherwise is (``_conflicting``): the instance's own event, or the sweeper's adoption
        of its action, starts its lifecycle. (When this message is the true one and the crossed came first, it is
        rejected all the same: no API tells which instance a token is of. Told, for an operator.)

        Unless the holder is no action Auto Scaling has for its instance: a lifecycle never confirmed that ended
        (``unknown-action``: an instance in service named with the token, a forgery taken in before the true
        event), or one not confirmed yet that Auto Scaling does not confirm now (one call, on this path alone).
        Then this record takes the token from it (the second of the pair returned): the forgery, open, ends at its
        own check."""
        if holder is None:
            return None, None  # (its item expired since the write: written again)
        known = self._records.get(holder)
        if known is not None and not known.action_confirmed:
            if known.finished or not self._autoscaling.confirm(known.action):
                log.warning(
                    "the token %s is held by lifecycle %s, which Auto Scaling does not confirm (%s): taken from it",
                    record.token,
                    holder,
                    known.outcome or "not where its action would hold it",
                )
                return None, holder
            self._metrics.count("Heartbeats")
        self._metrics.count("LifecycleEventsRejected", reason="token-conflict")
        log.warning(
            "dropped: the token %s this event names with instance %s is lifecycle %s's, of instance %s: a token is "
            "one action of one instance, so one of the two messages is forged, or names its instance with the "
            "other's token",
            record.token,
            record.instance_id,
            holder,
            parse_record_id(holder)[0],
        )
        return IntakeOutcome.TOKEN_CONFLICT, None

    def _claimed(self, record: LifecycleRecord, claim: ActionClaim | None) -> IntakeOutcome | None:
        """What the action's claim (None: none) leaves to ``record``, before it is written; None: it is written."""
        if claim is None:
            return None
        if claim.lifecycle != record.id:
            return self._taken(record, claim)
        # (a record's own claim, read when the claim's write was refused or the action lapsed: its record is gone)
        return self._outlived(record, claim) if record.token_known else None

    def _outlived(self, record: LifecycleRecord, claim: ActionClaim) -> IntakeOutcome:
        """The event of an action whose lifecycle (the claim's) was taken in and whose record is gone: deleted
        by the table's TTL, a TTL after the lifecycle finished, while the claim is kept until the action's global
        timeout and a TTL past it (a late event of the action can come until then: a notification redriven from
        the dead-letter queue days later, a message the queue kept). A claim is written only with its record,
        and nothing but the TTL deletes a record, so the action was taken in and its lifecycle ended: a
        duplicate. Taken for new, it would start a second lifecycle of an action long completed (its check
        finds no action: an unknown action's alarm), or, Auto Scaling holding it no more, count it expired."""
        log.info(
            "duplicate delivery of a lifecycle action (started %s) whose lifecycle ended and whose record has "
            "expired since: nothing to do",
            claim.since,
        )
        self._metrics.count("LifecycleEventsDuplicate")
        return IntakeOutcome.DUPLICATE

    def _timed_out(self, record: LifecycleRecord, now: datetime) -> IntakeOutcome:
        """The event of an action that timed out before it came (a stalled queue, an event retried late), with
        no lifecycle of it: Auto Scaling applied the hook's default result, and the instance went on (a launch
        in service or terminated, a terminating node gone) with no drain or gate of this stack's. Nothing is
        left to do for it. A lifecycle would cost a record and a step, whose check would find no action and
        report it as unknown (forged or replayed, nothing disrupted); it is an expired action (a node may have
        gone undrained), told here, where it is known."""
        log.warning(
            "dropped: the %s action of %s came %.0f s after its heartbeat timeout (%s), and Auto Scaling no longer "
            "holds it: it applied hook %s's default result, with nothing done by this stack (a stalled intake "
            "queue, or an event retried late)",
            record.transition.short,
            record.instance_id,
            (now - record.heartbeat_deadline).total_seconds(),
            record.heartbeat_deadline,
            record.hook,
        )
        self._metrics.count("LifecycleEventsRejected", reason="expired")
        self._metrics.count("LifecycleActionsExpired")
        return IntakeOutcome.EXPIRED

    def _conflicting(self, known: LifecycleRecord, record: LifecycleRecord) -> IntakeOutcome:
        """The action's token taken in named otherwise (``known``) than ``record`` names it (``_told_otherwise``).
        Auto Scaling issues a token for one action of one hook of one group and renames neither (a hook put
        under a new name is another hook, whose actions have tokens of their own), and an action makes one move:
        one of the two messages is forged or broken. By its id (instance, transition, token) the second would be
        a quiet duplicate of the first, which hides a forgery, and, when the forged one came first, keeps the
        true action from its lifecycle until the forged one ended unconfirmed and a sweep adopted the true one.

        Auto Scaling holds the action under its own group and hook alone, and its instance in the wait state of
        its move, and says which (``confirm``). When it is ``record``'s, its lifecycle takes the record over, on
        the next seq (the other's messages arrive stale): at once if the other's lifecycle has not begun a step
        or is over, else after its retry (that lifecycle's first step finds its action unconfirmed and ends
        it). Otherwise ``record`` is rejected."""
        active = self._autoscaling.confirm(record.action)
        self._metrics.count("LifecycleEventsRejected", reason="token-conflict")
        if not active:
            log.warning(
                "dropped: the lifecycle action %s of %s was taken in as %s (lifecycle %s); this event names it "
                "%s, as which Auto Scaling does not hold it: forged or broken",
                record.token,
                record.instance_id,
                _named(known),
                known.id,
                _named(record),
            )
            return IntakeOutcome.TOKEN_CONFLICT
        self._metrics.count("Heartbeats")
        if not known.finished and known.updated_at != known.received_at:
            raise TransientError(
                f"the lifecycle action {record.token} of {record.instance_id} was taken in as {_named(known)}, "
                "as which Auto Scaling does not hold it, and that lifecycle is running a step: retried once it "
                "is over"
            )
        taken = record.model_copy(update={"seq": known.seq + 1})
        claim = self._records.claim(record)
        if claim is not None and claim.lifecycle != known.id and claim.since >= record.started_at:
            # (a lifecycle of a later action of the instance under its own hook, or this one's, which took the
            # record over since it was read: the record's id is the action's. The other's claim, when the two
            # hooks have the same name (one per instance, transition and hook), is taken over with the record.)
            return self._known(self._records.get(record.id), self._clock.now())
        if self._records.write_claimed(taken, claim, expected_seq=known.seq) is not Claimed.WRITTEN:
            return self._known(self._records.get(record.id), self._clock.now())
        self._send_first(taken)
        log.warning(
            "the lifecycle action %s of %s was taken in as %s (forged or broken), as which Auto Scaling does not "
            "hold it: it goes on as %s, which it does",
            record.token,
            record.instance_id,
            _named(known),
            _named(record),
        )
        return IntakeOutcome.ACCEPTED

    def _adopted_without_claim(self, record: LifecycleRecord, now: datetime) -> bool:
        """Whether the sweeper adopted this action before its event came (late: redriven from the dead-letter
        queue, or retried for hours) as a release before the claims did: with a record and no claim, which the
        claim's write would not see (a record adopted since has its claim, and this read tells as it does). Only
        an event older than the sweeper waits before adopting can be: the others cost no read. An adopted
        lifecycle that started after this action did is of this action (a hook holds one action of an instance
        at a time); one adopted before it started is of an earlier one."""
        if now - record.started_at < self._adopt_after / 2:
            return False
        adopted = self._records.get(
            record_id(record.instance_id, record.transition, adopted_token(record.hook))
        )
        if adopted is None or adopted.received_at < record.started_at:
            return False
        log.warning(
            "late event of a lifecycle action the sweeper adopted (%s, received %s): nothing to do",
            adopted.id,
            adopted.received_at,
        )
        self._metrics.count("LifecycleEventsDuplicate")
        return True

    def _write_action(
        self, record: LifecycleRecord, expected: ActionClaim | None, displacing: str | None = None
    ) -> tuple[Claimed | TokenTaken, LifecycleRecord]:
        """Write a new record of a hook's lifecycle with its claim. An adopted one's record is that of the
        instance's earlier adopted lifecycle under the hook (one id per instance, transition and hook): over,
        it starts again there (on the next seq, so a late message of the old one is stale). Whenever it ended:
        the action the sweeper found held now is another (by the time it is adopted, the listing before the
        one that first found it may be older than that end: the two actions can be a few seconds apart)."""
        written = self._records.write_claimed(record, expected, displacing=displacing)
        if written is not Claimed.RECORD_TAKEN or record.token_known:
            return written, record
        known = self._records.get(record.id)
        if known is None or not known.finished:
            return written, record
        restarted = record.model_copy(update={"seq": known.seq + 1})
        return self._records.write_claimed(restarted, expected, expected_seq=known.seq), restarted

    def _after(self, record: LifecycleRecord, claim: ActionClaim) -> IntakeOutcome | None:
        """``record``, which started after the action its instance's claim names: None when that action is over
        (``record``'s is a later one, and its lifecycle replaces the claim's); rejected while Auto Scaling still
        holds the claim's token. A hook holds one action of an instance at a time, so ``record`` is then forged or
        crossed: its instance named, on the intake queue, with another held instance's live token, which an Auto
        Scaling that takes a token alone accepts. Taken for a later action, it replaced the instance's own
        lifecycle, took its slot ahead of it and cordoned its node, and, once the other instance's action ended,
        its cleanup cleared the node's claim while the instance's own drain waited. Asked only when the claim's
        lifecycle is still open (one heartbeat), so an instance back from its warm pool costs nothing."""
        earlier = None if claim.adopted else self._records.get(claim.lifecycle)
        if (
            earlier is not None
            and earlier.extra.get(CARRIED_OVER)
            and earlier.completed_at is not None
            and record.started_at <= earlier.completed_at
        ):
            # (it completed the action its instance's hook held then, named by the instance: this one, started
            # before that completion, or an earlier one; a later action of the instance starts after it)
            return self._carried_over_to(record, earlier)
        if earlier is None or not earlier.token_known or not earlier.action_open:
            return None
        if not self._autoscaling.heartbeat(earlier.action):
            return None
        self._metrics.count("Heartbeats")
        if earlier.extra.get(CARRIED_OVER):
            return self._carried_over_to(record, earlier)
        self._metrics.count("LifecycleEventsRejected", reason="token-conflict")
        log.warning(
            "dropped: the %s action of %s under hook %s is lifecycle %s's, whose token Auto Scaling still holds; "
            "this event names it with token %s, started later: a hook holds one action of an instance at a time, "
            "so it is forged, or names the instance with another's token",
            record.transition.short,
            record.instance_id,
            record.hook,
            claim.lifecycle,
            record.token,
        )
        return IntakeOutcome.TOKEN_CONFLICT

    def _taken(self, record: LifecycleRecord, claim: ActionClaim) -> IntakeOutcome | None:
        """What another lifecycle's claim on the action leaves to ``record``: None when that lifecycle is of an
        earlier action, over (the instance is back from its warm pool), and ``record``'s replaces it."""
        if record.token_known:
            # (a hook holds one action of an instance at a time: one of them that started before this one and
            # is the claim's, or was adopted before it started, is over)
            if claim.since < record.started_at:
                return self._after(record, claim)
            if not claim.adopted:
                claiming = self._records.get(claim.lifecycle)
                if claiming is not None and claiming.extra.get(CARRIED_OVER) and claiming.action_open:
                    # (named by the instance: it drains for whichever action the hook holds the instance by, this
                    # event's when it is still held, and an earlier event's action is over)
                    return self._carried_over_to(record, claiming)
            # (an instance EC2 does not show in the group named is not heartbeated: see _of_its_group)
            if (
                not claim.adopted
                and self._of_its_group(record)
                and self._autoscaling.heartbeat(record.action)
            ):
                # A claim's start is its event's time, which a message sent to the intake queue can set (forged,
                # or a replay edited): taken in first, such a lifecycle would make the action's own event a
                # duplicate, and the node wait undrained for the sweeper's adoption. Auto Scaling holds this
                # token's action now, so the claim's lifecycle is not of it (a hook holds one action of an
                # instance at a time): this one replaces it, and that one ends at its own check.
                log.warning(
                    "lifecycle %s claimed this action of %s with a later start, but Auto Scaling holds this "
                    "token's: it goes on",
                    claim.lifecycle,
                    record.instance_id,
                )
                self._metrics.count("Heartbeats")
                return None
            self._metrics.count("LifecycleEventsDuplicate")
            if claim.adopted:
                log.warning(
                    "late event of a lifecycle action the sweeper adopted (%s, at %s): nothing to do",
                    claim.lifecycle,
                    claim.since,
                )
                return IntakeOutcome.ADOPTED
            log.warning(
                "event of an action of %s older than the one lifecycle %s goes on for: nothing to do",
                record.instance_id,
                claim.lifecycle,
            )
            return IntakeOutcome.DUPLICATE
        # Adopting: the claim is of this action when its lifecycle still holds an action (its event's lifecycle,
        # written since the sweep listed the open ones), of an earlier one when that lifecycle's is over.
        other = self._records.get(claim.lifecycle)
        if other is None or not other.action_open:
            return None
        log.warning("not adopted: lifecycle %s of the action came first", claim.lifecycle)
        return IntakeOutcome.DUPLICATE

    def _carried_over_to(self, record: LifecycleRecord, carried: LifecycleRecord) -> IntakeOutcome:
        """``record``, an event of the action its instance's hook holds it by, which ``carried`` drains for: a
        lifecycle taken in under another instance's token (crossed) and carried over to the action of its own
        instance when that token's action ended (drain.cleanup ``_carried_over``), named by the instance from then
        on, as an adopted one is. The instance's own event, come late (lagging, or retried), is a late event of
        it, as of an adopted action. Taken in, it started a second lifecycle of the action beside it (its own slot
        ask, cordon and drain of the node, a second completion) when dated before the crossed message, and was
        counted a rejected forgery when dated after; once that lifecycle completed the action, it started one for
        an action over, whose first step found no action (an unknown action's page)."""
        log.warning(
            "late event of the %s action of %s, which lifecycle %s (taken in under token %s, carried over to the "
            "action the hook holds the instance by) drains or drained for: nothing to do",
            record.transition.short,
            record.instance_id,
            carried.id,
            carried.extra.get(CARRIED_OVER),
        )
        self._metrics.count("LifecycleEventsDuplicate")
        return IntakeOutcome.DUPLICATE

    def _known(self, known: LifecycleRecord | None, now: datetime, *, moved: bool = False) -> IntakeOutcome:
        """A duplicate delivery of a known lifecycle (``known``, as read after its write was refused);
        ``moved``: a delivery of an event that moved it on its record (see ``_moved_by``)."""
        # A crash between the record's write and its first message leaves a record nobody works on: the
        # redelivery that follows the crash re-sends the message. Only when it is overdue, so that an
        # ordinary duplicate does not make a second unit of work. Whether new or started over on its record (the
        # next stop or interruption of the instance, on the next seq): as intake wrote it, no step has run, as
        # every step's commit and every resume moves ``updated_at`` past ``received_at``. (A lifecycle started
        # over has no older message left either, whose redelivery would send a watch.)
        if known is not None and known.updated_at == known.received_at and not known.finished:
            if known.overdue(now, self._resume_grace):
                self._send_first(known)
                log.warning("re-sent the first step of a known lifecycle action whose message was lost")
                return IntakeOutcome.RESENT
            # Too early to tell a lost first message from one on its way: a watch comes back once the step is
            # overdue and sends it again if nothing ran (as the engine's watch of a redelivered message). The
            # event's retries end with this answer, and the sweeper would repair only minutes later.
            self._dispatch.watch(known, now, self._resume_grace)
        elif known is not None and moved and not known.finished:
            # A move's commit took the lifecycle to a new seq (the message it waited with arrives stale), and
            # its message may have been refused after it: this retry of the event is the last delivery that can
            # tell. Steps may have run since, so not the step again: a watch, which finds the chain moved on
            # (stale) or repairs it once overdue, rather than leave it to the sweeper.
            self._dispatch.watch(known, now, self._resume_grace)
        log.info("duplicate delivery of a known lifecycle action: nothing to do")
        self._metrics.count("LifecycleEventsDuplicate")
        return IntakeOutcome.DUPLICATE

    @staticmethod
    def _anew(known: LifecycleRecord, record: LifecycleRecord) -> bool:
        """Whether ``record`` tells of another disruption than the finished ``known``. AWS Health sends an
        event again (a new id) whenever it updates one; only another start (EC2 moved it, or it is another
        maintenance EC2 lists) makes it other maintenance."""
        if known.transition is Transition.STATE_CHANGE:
            return _another_state_change(
                known, record.token, record.extra.get(INSTANCE_STATE), record.started_at
            )
        if known.transition is Transition.SCHEDULED_CHANGE:
            # (nor one an earlier lifecycle on the record was for: an update of it)
            return record.global_deadline not in {known.global_deadline, *known.done_starts}
        if known.transition is Transition.SPOT_INTERRUPTION:
            # A Spot instance that stops or hibernates when interrupted is started again when capacity comes
            # back, and can be interrupted again: a warning sent after the last interruption struck is another
            # one. Another warning of the same interruption is sent before it.
            return known.token != record.token and record.started_at >= known.global_deadline
        return False

    def _drain_due(self, starts: datetime, now: datetime) -> datetime:
        """When the lifecycle of maintenance starting at ``starts`` first runs: when its drain is due (a lead time
        before it, or now), or sooner, to look at EC2's listing of it by then (see policy.MAINTENANCE_LOOK: a
        customer may move it earlier, and no Health event tells of that); its first ask waits on until then."""
        return maintenance_next_run(starts, self._plan.maintenance_lead, now)

    def _rescheduled(
        self, known: LifecycleRecord, record: LifecycleRecord, now: datetime, listed: tuple[datetime, ...]
    ) -> bool:
        """Maintenance that starts earlier than the one a lifecycle waits (or drains) for: the lifecycle keeps
        its place and its work, under the earlier start. EC2 moved it earlier, or it is another maintenance,
        when EC2 still lists the known start: then that one follows as this lifecycle's successor. The step
        moves to a new seq, so that the message waiting for the old due time arrives stale and the lifecycle
        still has one chain of work (as a resume does)."""
        if (
            known.transition is not Transition.SCHEDULED_CHANGE
            or record.global_deadline >= known.global_deadline
        ):
            return False
        # (EC2's listing as the earlier start's event found it: the start the lifecycle now drains for)
        extra = {key: value for key, value in known.extra.items() if key != MAINTENANCE_LISTED}
        # (its claim of the node and its budget entries, written under the token it had, stay its own)
        before = [token for token in known.extra.get(TOKENS_BEFORE) or [] if token != record.token]
        if known.token != record.token:
            extra[TOKENS_BEFORE] = [*before, known.token]
        moved = known.model_copy(
            update={
                "seq": known.seq + 1,
                "token": record.token,
                "extra": extra | ({MAINTENANCE_LISTED: True} if record.extra.get(MAINTENANCE_LISTED) else {}),
                "updated_at": now,
                "due_at": min(known.due_at, record.due_at),
                "heartbeat_deadline": record.heartbeat_deadline,
                "global_deadline": record.global_deadline,
            }
        )
        if known.global_deadline in listed:
            later = record.model_copy(
                update={
                    "token": known.token,
                    "extra": {**record.extra, MAINTENANCE_LISTED: True},  # (EC2 lists its start)
                    "due_at": self._drain_due(known.global_deadline, now),
                    "heartbeat_deadline": known.global_deadline,
                    "global_deadline": known.global_deadline,
                }
            )
            moved = _with_successor(moved, later) or moved
        if not self._records.commit(moved, expected_seq=known.seq):
            return False  # another delivery moved it (or the lifecycle moved on): this one is a duplicate
        self._send_first(moved)
        log.info(
            "maintenance of %s at %s, before the one its lifecycle waits for: it goes first",
            known.instance_id,
            record.global_deadline,
        )
        return True

    def _queued(
        self, known: LifecycleRecord, record: LifecycleRecord, now: datetime, listed: tuple[datetime, ...]
    ) -> bool:
        """Another maintenance that starts after the one a lifecycle waits (or drains) for, while EC2 lists
        both: its lifecycle follows this one's on the record (one record per instance and cause), told now,
        since AWS Health does not tell of it again. (EC2 moved the known one later when it lists it no
        more: a duplicate, the known lifecycle's drain timed by EC2's listing at its first ask, see
        drain.acquire.) Whatever EC2 lists once the known
        lifecycle's drain is over: its cleanup watches for the end of its maintenance, which EC2 no longer lists
        as pending once done, and a later start is the next maintenance then, not the known one moved."""
        drained = known.step is Step.CLEANUP and known.drain_started_at is not None
        if (
            known.transition is not Transition.SCHEDULED_CHANGE
            or record.global_deadline <= known.global_deadline
            or (known.global_deadline not in listed and not drained)
        ):
            return False
        queued = _with_successor(known, record)
        if queued is None:
            return False  # known already: a duplicate
        queued = queued.model_copy(update={"seq": known.seq + 1, "updated_at": now})
        if drained:
            # Its cleanup sleeps until the maintenance's window opens, and hands the record over to the next
            # lifecycle (which takes the cordon over) only when it looks again: woken now, the next lifecycle
            # starts at once (its own due time, what status shows), not up to the lead time later.
            queued = queued.model_copy(update={"due_at": min(queued.due_at, now)})
        if not self._records.commit(queued, expected_seq=known.seq):
            return False  # another delivery queued it (or the lifecycle moved on)
        self._send_first(queued)
        log.info(
            "maintenance of %s at %s, after the one its lifecycle waits for: it follows",
            known.instance_id,
            record.global_deadline,
        )
        return True

    def _new_record(self, event: LifecycleEvent, heartbeat_timeout: int, now: datetime) -> LifecycleRecord:
        plan = plan_for(event, self._plan)
        return LifecycleRecord(
            **event.model_dump(exclude={"delivery"}),  # the action, its timing and its warm-pool moves
            id=event.record_id,
            owner=self._owner,
            plan=plan,
            step=plan[0],
            received_at=now,
            updated_at=now,
            due_at=now,
            heartbeat_timeout=heartbeat_timeout,
            heartbeat_deadline=event.started_at + timedelta(seconds=heartbeat_timeout),
            global_deadline=global_deadline(event.started_at, heartbeat_timeout),
        )

    def _keep_alive(self, record: LifecycleRecord, now: datetime) -> tuple[LifecycleRecord, bool]:
        """Heartbeat an action that reached intake late (a backed-up or slow delivery) when its first step,
        retried after one fault, might not run in time to heartbeat it: with less than the margin and one
        redelivery left. Seen under load: an action accepted with 12 s of its 30 s left expired while its
        first message waited behind duplicates in the work queue, before any sweep could renew it.

        The heartbeat does not confirm the action for the engine (the record is not stored as verified): Auto
        Scaling may accept a token named with another instance than its action's, and the engine's first
        confirmation also looks where the instance is (``Autoscaling.confirm``). Nor may it accept a token only
        with its own group: a late message naming this stack's group with the instance and live token of another
        group's action (another stack's, in the same account) must not keep that action alive, so an instance EC2
        does not show in the group named (its ``aws:autoscaling:groupName`` tag) is not heartbeated here. A failed
        heartbeat is left to the engine and the sweeper (the record is stored as it is): intake must not lose the
        event for it.

        With it, whether the action lapsed: its event's action, past its heartbeat deadline, which Auto Scaling
        no longer holds for its instance in its group (timed out with the hook's default result, unless this is
        a late duplicate of a lifecycle that settled it: ``_store_action`` tells)."""
        if (
            record.heartbeat_deadline >= record.global_deadline
            or record.heartbeat_deadline - now > self._retry_window
        ):
            return record, False
        try:
            if not self._of_its_group(record):
                return record, False
            active = self._autoscaling.heartbeat(record.action)
        except TransientError as error:
            log.warning("could not heartbeat the late lifecycle action (its first step will): %s", error)
            return record, False
        if not active:
            # gone, or a duplicate of a finished one: the engine's check says what it was (an adopted action is
            # named by its instance, which is no longer waiting: the sweeper's listing and this read disagree)
            return record, record.token_known and now > record.heartbeat_deadline and self._timed_out_so(
                record
            )
        self._metrics.count("Heartbeats")
        left = (record.heartbeat_deadline - now).total_seconds()
        log.info("heartbeat for a lifecycle action received %.0f s before its heartbeat deadline", left)
        # (as of Auto Scaling's answer when this function's clock runs ahead of it: see Autoscaling.renewed_at)
        return record.renewed(self._autoscaling.renewed_at(now)), False

    def _timed_out_so(self, record: LifecycleRecord) -> bool:
        """Whether the instance is where its action's default result put it: a terminating instance never back
        in service (it went, or went back to a warm pool), a launch in service or gone. A message dated past its
        hook's timeout that names an instance in service with a terminate token Auto Scaling does not hold is no
        action that timed out (forged, or a replay of one long over): its lifecycle's check tells it as unknown.
        Not known when Auto Scaling does not answer: left to that check too.

        A root volume replacement's terminate action is the exception: at its timeout the replacement goes on
        and the instance comes back, through the launch hooks (Pending:Wait) into service, or is terminated when
        the replacement fails ("Replace root volumes during instance refresh", Amazon EC2 Auto Scaling user
        guide). Anywhere but still held for a replacement (ReplacingRootVolume:Wait, under an action whose token
        this is not) is where its timeout put it: its node went undrained, an expired action."""
        try:
            state = self._autoscaling.lifecycle_state(record.instance_id)
        except TransientError:
            return False
        if record.replaces_root_volume:
            return state != _HELD_FOR_A_REPLACEMENT
        if record.transition is Transition.TERMINATING:
            return state is None or not state.startswith(_NOT_TERMINATED)
        return True

    def _of_its_group(self, record: LifecycleRecord) -> bool:
        """Whether EC2 shows ``record``'s instance in the group its event named (True when intake has no
        instance directory to ask), before a heartbeat of its action: Auto Scaling may take a token named with
        another group than its action's (see ``Autoscaling.confirm``), and a message naming this stack's group with
        the instance and live token of another stack's action must not keep that action alive."""
        if self._instances is None:
            return True
        facts = self._instances.facts(record.instance_id)
        if facts is not None and facts.group == record.group:
            return True
        log.warning(
            "instance %s is not of group %s (%s): its action is not heartbeated here",
            record.instance_id,
            record.group,
            "unknown to EC2" if facts is None else f"of {facts.group or 'no group'}",
        )
        return False

    def _send_first(self, record: LifecycleRecord) -> None:
        self._dispatch.send(record, self._clock.now())


def _resting(known: LifecycleRecord) -> bool:
    """Whether the open lifecycle ``known`` only watches, its drain over: a Spot interruption's that stopped its
    instance, waiting for EC2 to start it again to lift the cordon it kept (SPOT_WATCH). An interruption of the
    instance after the one it drained for is another, as after a finished lifecycle: taken for a duplicate, the
    instance started again meanwhile, the watch lifted the cordon at its next look, and the node took pods again
    that the second interruption then stopped undrained."""
    return known.transition is Transition.SPOT_INTERRUPTION and bool(known.extra.get(SPOT_WATCH))


def _moved_by(known: LifecycleRecord, record: LifecycleRecord) -> bool:
    """Whether ``record``'s event is one that moved the open maintenance lifecycle ``known`` to a new seq on its
    record: rescheduled it under its own start and id (``Intake._rescheduled``), or queued its maintenance
    after it (``Intake._queued``). (Also true of a redelivery of the event that started it: a watch for it costs
    a message, and finds the chain moved on.)"""
    if known.transition is not Transition.SCHEDULED_CHANGE or known.finished:
        return False
    if known.token == record.token:
        return True
    return record.global_deadline > known.global_deadline and _with_successor(known, record) is None


def _told_otherwise(known: LifecycleRecord, record: LifecycleRecord) -> bool:
    """Whether ``record`` names the action of the record ``known`` (the same instance, transition and token)
    otherwise: another group or hook, or another move (origin, destination) where both tell it (one that does
    not tell it is not another telling)."""
    if (known.group, known.hook) != (record.group, record.hook):
        return True
    return any(
        told is not None and again is not None and told != again
        for told, again in ((known.origin, record.origin), (known.destination, record.destination))
    )


def _named(record: LifecycleRecord) -> str:
    """How ``record`` names its action, for a log line."""
    moved = f", from {record.origin} to {record.destination}" if record.origin or record.destination else ""
    return f"group {record.group} hook {record.hook}{moved}"


# The two state changes EC2 tells of one stop, and of one termination
_ONE_DISRUPTION = frozenset({("stopping", "stopped"), ("shutting-down", "terminated")})


def _another_state_change(
    known: LifecycleRecord, token: str, state: str | None, happened_at: datetime
) -> bool:
    """Whether a state change (event ``token`` at ``happened_at``, the instance's new ``state``) tells of another
    stop or termination than the finished state-change lifecycle ``known``: an instance stopped, started again and
    stopped again is (EC2 tells of its start to no one here); the second state change of one stop or termination
    is not, nor is anything after a termination, through the hooks (ENDED_BY) or not, nor anything that happened
    before the state change ``known`` was started by: EventBridge keeps no order, and a stop's "stopping" can come
    after its "stopped" (a delivery retried), whose lifecycle is over by then. (Times are EventBridge's whole
    seconds, and a stop takes longer than one. Never later than the second ``known`` was received in: a time
    still to come is a forgery's, by the queue, which must not make the instance's next stops look older.)"""
    told_at = min(known.started_at, known.received_at.replace(microsecond=0))
    if token == known.token or happened_at < told_at:
        return False
    told = known.extra.get(INSTANCE_STATE)
    if known.extra.get(ENDED_BY) or told in GONE_STATES:
        return False
    if told is None:
        return True  # a record from before the state was noted: as then
    return (told, state) not in _ONE_DISRUPTION
