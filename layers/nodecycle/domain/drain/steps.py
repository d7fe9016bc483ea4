"""The drain of a terminating node. Each step is short and idempotent: a redelivery runs it again safely.

ACQUIRE_SLOT (find the node, take a budget slot or wait) -> CORDON (owner + in-progress annotations and the
cordon in one PATCH) -> EVICT (evict, then poll until the pods are gone; timeout policy; load balancer
delay) -> [RELEASE_EIP] -> COMPLETE -> CLEANUP (clear the annotations in one PATCH, release the slot, wake
the next waiter).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from nodecycle.domain.budget import SlotDecision, SlotReason, SlotRequest
from nodecycle.domain.completion import SETTLED_ELSEWHERE
from nodecycle.domain.drain import pods as podfilter
from nodecycle.domain.engine import Dispatcher, Outcome
from nodecycle.domain.errors import TransientError, retry_after_wait
from nodecycle.domain.flow import settle_step
from nodecycle.domain.model import (
    EARLIER_DRAIN,
    ENDS_ITS_INSTANCE,
    KEPT_ON_NODE,
    SET_ON_NODE,
    SUCCESSOR,
    WARM_POOL,
    LifecycleRecord,
    Step,
    Transition,
    record_id,
)
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import DrainPolicy, TimeoutPolicy
from nodecycle.domain.ports.budget import Slots
from nodecycle.domain.ports.cluster import Claim, Cluster, Events, Eviction, NodeInfo, PodInfo, Refused
from nodecycle.domain.ports.instances import Instances, MaintainedInstances, ScheduledEvent, up
from nodecycle.domain.ports.lifecycle import Autoscaling, RecordStore
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

FORCED_POD_SLACK = timedelta(seconds=60)  # after a forced delete's grace: a pod still there is stuck
# A pod still there this long after its deletion's deadline (deletionTimestamp: request + grace) will not go by
# itself (a finalizer nobody removes, a kubelet that is gone): kubectl drain's --skip-wait-for-delete-timeout.
STUCK_AFTER = timedelta(seconds=60)
# A pod asked to go this long ago (or past its own deletion deadline, whichever comes first) and still there
# makes the drain look at its node: on a node whose kubelet is gone (Ready Unknown), pods being deleted never
# finish, and waiting for them only holds a budget slot. Until then the node is not read at all.
CHECK_NODE_AFTER = timedelta(seconds=15)
STUCK_PODS = "stuck_pods"  # record.extra key: pods the drain stopped waiting for, and why
FORCED_SLOT = "forced_slot"  # record.extra key: the slot was taken without room (global timeout near)
BLOCKED_REPORTED = "blocked_reported"  # record.extra key: pods whose blocked eviction an Event told of
DELETION_REFUSED = "deletion_refused"  # record.extra key: pods whose refused forced delete an Event told of
# record.extra key: pods a call for (an eviction, a forced delete) failed transiently in this drain: they go last
FAILED_PODS = "failed_pods"
# A pass over the pods stops calling after this many transient failures: one pod's call failing is that pod's
# trouble, more is the API server's, and each may have cost a read timeout of the step's minute.
FAILURES_PER_PASS = 2
# record.extra key: since when the API server refuses the drain's cordon (a webhook that guards the node, RBAC)
CORDON_REFUSED = "cordon_refused"
# record.extra key: since when the API server refuses the drain what it polls with (its node, its pods, its
# budget slot's renewal: RBAC)
READS_REFUSED = "reads_refused"
DRAINED_AT = "drained_at"  # record.extra key: when the node was found empty (the load balancer delay starts)
POLLS = "polls"  # record.extra key: how often the drain has looked for its pods so far
# (record.extra's SET_ON_NODE: what nodecycle itself set on the node when it claimed it; see the model)
# record.extra key: a node gone into the warm pool with its cordon kept, watched for the moment it may be lifted
POOL_WATCH = "pool_watch"
POOL_IDLE = "pool_idle"  # record.extra key: its node was found waiting in a running warm pool (told once)
POOL_POLL_SECONDS = 10  # how often a cleanup into the warm pool looks at its node until it may uncordon it
# A stopped instance's node is NotReady a minute after the stop. Still Ready after this, the instance waits in
# a running pool (PoolState Running): it is looked at less often, until it leaves the pool.
POOL_WATCH_SECONDS = 15 * 60
POOL_IDLE_POLL_SECONDS = 60
# record.extra key: a node drained for scheduled maintenance, its cordon kept, watched since then for the moment
# the maintenance is over
MAINTENANCE_WATCH = "maintenance_watch"
# How often that watch looks (EC2, Auto Scaling, the node) once the maintenance may have begun, in drain polls
# (DrainPollSeconds): once a minute at the template's 5 s; before its window it sleeps until the window opens
MAINTENANCE_POLLS_PER_LOOK = 12
MAINTENANCE_POLL_SECONDS = MAINTENANCE_POLLS_PER_LOOK * 5
# A maintenance EC2 still lists as pending this long after its window's end (NotAfter) is over all the same
MAINTENANCE_OVER_AFTER = timedelta(minutes=15)
# Windows are hours. A watch still waiting this long after the maintenance's start (a kubelet that never came
# back, an instance left in Standby) ends with the cordon kept, as before there was a watch: an operator looks.
MAINTENANCE_WATCH_LIMIT = timedelta(days=2)
# Auto Scaling lifecycle states of an instance that is leaving its group's service for good (or into its pool)
LEAVING_STATES = ("Terminating", "Terminated", "Detaching", "Detached", "Warmed")
# The disruptions without a hook whose drain a later terminate hook of the same instance finds done
LINKED_CAUSES = (Transition.SPOT_INTERRUPTION, Transition.SCHEDULED_CHANGE, Transition.REBALANCE)
LINKED_POLL_SECONDS = 5
# A Spot instance's drain ends this long before the interruption: a pod's grace never reaches past it
SPOT_MARGIN = timedelta(seconds=10)
ADOPT_FROM = (
    "adopt_from"  # record.extra key: the owner whose stale claim on the node this lifecycle takes over
)


def _poll_delay(polls: int, every: int) -> int:
    """1 s, 2 s, 4 s... up to the configured poll interval: most pods are gone within seconds, and a slot
    held by an empty node waiting for its next poll is a slot the budget's waiters cannot use."""
    return int(min(every, 2**polls))


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


def _known[T](value: T | None, what: str) -> T:
    """A record field an earlier step of the plan has set."""
    if value is None:
        raise RuntimeError(f"lifecycle record has no {what}: the plan's steps ran out of order")
    return value


def _slot_request(
    record: LifecycleRecord,
    node: str,
    zone: str | None,
    *,
    in_progress: bool = False,
    urgent_at: datetime | None = None,
    force: bool = False,
) -> SlotRequest:
    return SlotRequest(
        node=node,
        instance_id=record.instance_id,
        zone=zone,
        owner=record.owner,
        record_id=record.id,
        token=record.token,
        since=record.received_at,
        in_progress=in_progress,
        urgent_at=urgent_at,
        force=force,
    )


def _wake(dispatcher: Dispatcher, waiters: Iterable[str]) -> None:
    """Wake the waiters a slot request's budget write made eligible (by removing expired entries). A wake-up
    only comes sooner than the waiter's own retry, and this step's retry would not send it again (its write
    is done: the next finds nothing left to remove). So one that SQS or DynamoDB refuses fails neither the
    step (a drain's poll, a slot just granted) nor the other waiters' wake-ups. (A release's refused wake-up
    fails its cleanup instead: the cleanup's retry, a repeated release, wakes every eligible waiter.)"""
    for waiter in waiters:
        try:
            dispatcher.wake(waiter)
        except TransientError as error:
            log.warning("could not wake waiter %s (it asks for the slot at its retry): %s", waiter, error)


def _tail(policy: DrainPolicy) -> timedelta:
    """What a drain needs after its timeout: the force policy's grace, a stuck pod's margin, the load balancer
    delay waited once the node is empty, and the margin before the action's global timeout at which the
    engine completes it whatever happens."""
    return (
        timedelta(seconds=policy.force_grace)
        + STUCK_AFTER
        + policy.lb_deregistration_delay
        + policy.settle_margin
    )


def _full_drain(policy: DrainPolicy) -> timedelta:
    """The longest a whole drain takes, from its cordon to the completion of its action."""
    return policy.timeout + _tail(policy)


def _deadline_cap(record: LifecycleRecord, policy: DrainPolicy) -> datetime:
    """The latest a drain's deadline may be: where its timeout policy still has time to act before the
    action's global timeout (a Spot interruption's two minutes end sooner)."""
    if record.transition is Transition.SPOT_INTERRUPTION:
        return record.global_deadline - SPOT_MARGIN
    return record.global_deadline - _tail(policy)


def _cordoned_at(node: NodeInfo, record: LifecycleRecord, now: datetime) -> datetime:
    """When this lifecycle's own claim cordoned ``node``, if one did that the record does not tell of (its
    answer lost with the connection, its invocation ended after the PATCH; the step retried): the start its
    in-progress annotation carries. Else ``now``. The slot has been held for the drain since that cordon, and
    its bound (invariant 10) runs from it, not from the retry."""
    if node.lifecycle != record.id or not node.unschedulable:
        return now
    try:
        started = datetime.fromisoformat(str(node.progress().get("started")))
    except ValueError:
        return now
    return min(started, now) if started.tzinfo is not None else now


def _without_refusal(found: dict[str, Any], record: LifecycleRecord) -> dict[str, Any]:
    """The record's extra (as the step found it so far) without the note of a refused cordon: the cordon took
    effect, or the drain's time starts again with its next slot."""
    return {key: value for key, value in found.get("extra", record.extra).items() if key != CORDON_REFUSED}


def _precedence(record: LifecycleRecord, now: datetime, policy: DrainPolicy) -> dict[str, Any]:
    """A slot request's precedence near the action's global timeout. Near it a node goes before the others;
    nearer still it cannot wait any longer: it goes either way then, and a drain that respects
    PodDisruptionBudgets beats none, so it takes a slot even without room (a forced holder, which the others
    count). A Spot interruption is not the budget's to refuse: the capacity goes either way. A rebalance
    recommendation has no deadline (its record's is a horizon): it waits in line however long, and is never
    forced past the budget."""
    if record.transition is Transition.REBALANCE:
        return {"urgent_at": None, "force": False}
    full_drain = _full_drain(policy)
    return {
        "urgent_at": record.global_deadline - 2 * full_drain,
        "force": record.transition is Transition.SPOT_INTERRUPTION
        or now >= record.global_deadline - full_drain,
    }


# A waiter asks again at most this many times BudgetRetrySeconds apart, however far back in line it stands.
RETRY_IN_LINE_FACTOR = 4


def _retry_in_line(decision: SlotDecision, request: SlotRequest, now: datetime, policy: DrainPolicy) -> float:
    """When a node waiting in line asks again: every ``BudgetRetrySeconds`` while it stands among the next
    waiters its owner's slots could pass to, and that much longer for each round of those slots ahead of it
    (up to RETRY_IN_LINE_FACTOR times). In a burst, hundreds of waiters asking every 30 s read the whole
    queue from the API server many times a second, almost all of them for nothing: a released slot of its
    own stack is passed on and woken at once, whatever the waiter's retry; the retry is for another stack's
    slot and a lost wake-up, which the next waiters need soon and the last ones do not. Never later than a
    third of the place's TTL (each retry renews the place before it expires), nor than the moment its action's
    global timeout makes it go first (that precedence, and a slot taken without room after it, need an ask)."""
    base = policy.budget_retry_seconds
    if decision.ahead is None or decision.room is None:
        return base
    # (the waiters ahead that take another zone's slot are not counted: this node's turn is its zone's. The
    # rounds are of the slots its owner's limits give it, not of the holders now: right after a wave of
    # releases the slots owed to the waiters ahead hold nobody yet, and a node a round from its turn asked
    # as if each waiter ahead were one)
    rounds = decision.ahead // max(1, decision.room)
    delay = min(base * min(RETRY_IN_LINE_FACTOR, 1 + rounds), policy.holder_ttl.total_seconds() / 3)
    if request.urgent_at is not None:
        delay = min(delay, (request.urgent_at - now).total_seconds())
    return max(base, delay)


def _of_instance(node: NodeInfo, record: LifecycleRecord) -> bool:
    """Whether the node is the record's instance's. Node names are reused (a new instance given the private IP
    of one gone gets its DNS name, and its node the name of the node gone with it); provider ids are not. A
    node without one yet goes by its name, as the finder takes it."""
    return node.instance_id in (None, record.instance_id)


def _node_still_the_instances(cluster: Cluster, record: LifecycleRecord) -> NodeInfo | None:
    """The record's node read again by its name; None when it is gone, or when its name is another instance's
    node now (a recycled private IP): nothing there is this lifecycle's to cordon, evict or hold a slot for."""
    return _the_instances(cluster.get_node(_known(record.node, "node")), record)


def _the_instances(node: NodeInfo | None, record: LifecycleRecord) -> NodeInfo | None:
    """``node``, the node of the record's name as read, unless it is another instance's node now."""
    if node is not None and not _of_instance(node, record):
        log.warning(
            "node %s is instance %s's now: the node of %s is gone",
            node.name,
            node.instance_id,
            record.instance_id,
        )
        return None
    return node


def _set_on_node(noted: Mapping[str, object]) -> dict[str, bool]:
    """What a claim noted it set on the node (SET_ON_NODE); a claim from before that was noted set both."""
    return {"cordon": noted.get("cordon") is not False, "lb": noted.get("lb") is not False}


class _PodCalls:
    """The calls of one pass over a drain's pods (its evictions, or the force policy's deletes), where a call
    that fails transiently (a read timeout, a 502-504) is that pod's failure, not the pass's: it is counted as a
    retry, the pod is asked again at a later poll, and the other pods are asked now. The pods that failed go
    last, the one that failed most recently the very last, so pods that always fail never stand in the way of
    the others, nor of one that failed once."""

    def __init__(self, record: LifecycleRecord, metrics: Metrics) -> None:
        self._failed: list[str] = list(record.extra.get(FAILED_PODS) or [])  # oldest failure first
        self._metrics = metrics

    def answers[T](
        self, pods: Iterable[PodInfo], call: Callable[[PodInfo], T]
    ) -> Iterator[tuple[PodInfo, T]]:
        """Each pod and what ``call`` answered for it, up to the pass's ``FAILURES_PER_PASS``-th failure."""
        listed = list(pods)
        present = {pod.uid for pod in listed}
        self._failed = [uid for uid in self._failed if uid in present]  # a pod gone has no failure to keep
        order = {uid: place for place, uid in enumerate(self._failed)}
        failures = 0
        for pod in sorted(listed, key=lambda pod: order.get(pod.uid, -1)):
            try:
                answer = call(pod)
            except TransientError as error:
                log.warning("pod %s/%s: %s; asked again at the next poll", pod.namespace, pod.name, error)
                self._metrics.count("StepRetries", step=Step.EVICT.value)
                self._failed = [*(uid for uid in self._failed if uid != pod.uid), pod.uid]
                failures += 1
                if failures == FAILURES_PER_PASS:
                    return
                continue
            self._failed = [uid for uid in self._failed if uid != pod.uid]
            yield pod, answer

    def remembered(self, extra: dict[str, Any]) -> dict[str, Any]:
        """``extra`` with what the record keeps of the pass for the next: the pods that failed, in the order
        they go (none: nothing kept)."""
        kept = {key: value for key, value in extra.items() if key != FAILED_PODS}
        return {**kept, FAILED_PODS: list(self._failed)} if self._failed else kept


class AcquireSlot:
    def __init__(
        self,
        *,
        finder: NodeFinder,
        cluster: Cluster,
        slots: Slots,
        dispatcher: Dispatcher,
        policy: DrainPolicy,
        metrics: Metrics,
        events: Events,
        records: RecordStore,
    ):
        self._finder = finder
        self._cluster = cluster
        self._slots = slots
        self._dispatcher = dispatcher
        self._policy = policy
        self._metrics = metrics
        self._events = events
        self._records = records

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        if record.transition is Transition.TERMINATING:
            linked = self._linked(record, now)
            if linked is not None:
                return linked
        extra = record.extra
        node = self._cluster.get_node(record.node) if record.node else None
        if node is None or not _of_instance(node, record):
            # Not looked for yet, gone, or its name taken by another instance's node: look for the instance's
            node, extra = self._finder.find(record)
        if node is None:
            log.warning("no node for instance %s: nothing to drain", record.instance_id)
            self._metrics.count("NodesNotFound")
            return Outcome.goto(settle_step(record), outcome="node-not-found", extra=extra)
        found: dict[str, Any] = {"node": node.name, "node_uid": node.uid, "zone": node.zone, "extra": extra}
        foreign = node.owner not in (None, record.owner)
        request = _slot_request(record, node.name, node.zone, **_precedence(record, now, self._policy))
        decision = self._slots.acquire(request)
        # (its write removed the expired entries, a dead drain's slot among them: whom that lets go, goes now)
        _wake(self._dispatcher, decision.wake)
        if decision.reason is SlotReason.FORCED:
            log.warning(
                "node %s takes a budget slot without room: its action's global timeout is %s",
                node.name,
                record.global_deadline,
            )
            self._metrics.count("ForcedSlots")
            found["extra"] = {**found["extra"], FORCED_SLOT: True}
            self._events.on_node(
                node.name,
                node.uid,
                "DisruptionBudgetExceeded",
                f"Took a disruption budget slot without room: the lifecycle action of {record.instance_id} "
                f"times out at {record.global_deadline:%H:%M:%S}Z, too soon to wait; draining now",
                warning=True,
            )
        if decision.granted:
            if foreign:
                # The other stack annotated the node but holds no slot for it any more: its drain died or
                # gave up (its holder expired). Adopt the node, as one in progress with no owner.
                log.warning(
                    "adopting node %s from owner %s, which holds it in the budget no more",
                    node.name,
                    node.owner,
                )
                found["extra"] = {**found["extra"], ADOPT_FROM: node.owner}
            return Outcome.next(slot_waiting_since=None, **found)
        if foreign and decision.reason in (SlotReason.HELD_BY_OTHER_OWNER, SlotReason.CLAIMED_BY_OTHER_OWNER):
            # Another stack is draining this node: leave it alone, and settle our own action once it is
            # done with it, or when our drain timeout says we have waited long enough. Unless it drains for
            # this very action (a group both stacks manage, by mistake): completing it would let Auto Scaling
            # terminate the instance under that drain. Its end ends the action (a heartbeat finds it gone).
            shared = node.lifecycle == record.id
            if shared:
                log.error(
                    "owner %s drains node %s for this very lifecycle action: is group %s managed by both?",
                    node.owner,
                    node.name,
                    record.group,
                )
            elif now - record.received_at > self._policy.timeout:
                return Outcome.goto(settle_step(record), outcome=f"node-owned-by:{node.owner}", **found)
            log.info("node %s is being drained by owner %s: waiting", node.name, node.owner)
            return Outcome.wait(self._policy.budget_retry_seconds, **found)
        if decision.reason is SlotReason.HELD_BY_OTHER_LIFECYCLE:
            # Another lifecycle of this instance drains the node (a Spot interruption's, a rebalance's): after
            # it. A terminate hook then finds that drain over (see _linked); a disruption finds the node gone
            # or drained. It waits in line for the node: that drain's release wakes it (a lifecycle that has
            # not asked yet is not woken, hence the time it began waiting; nor one behind a third lifecycle of
            # the instance in line for the node, which has its place: it asks again at its retry).
            log.info(
                "node %s is being drained for another lifecycle of %s: waiting", node.name, record.instance_id
            )
            return Outcome.wait(
                self._policy.budget_retry_seconds,
                slot_waiting_since=record.slot_waiting_since or now,
                **found,
            )
        log.info("no budget slot for node %s yet: %s", node.name, decision.reason)
        if decision.reason is SlotReason.RELEASED:
            # This lifecycle drained and gave its slot back: a late delivery of this step (its commit loses)
            return Outcome.wait(self._policy.budget_retry_seconds, **found)
        if decision.reason is SlotReason.QUEUE_FULL:
            return Outcome.wait(self._policy.budget_retry_seconds, **found)
        if record.slot_waiting_since is None:
            place = "" if decision.position is None else f"{_ordinal(decision.position)} in line, "
            self._events.on_node(
                node.name,
                node.uid,
                "WaitingForDisruptionBudget",
                f"Waiting for a disruption budget slot to drain for the termination of {record.instance_id} "
                f"({place}{decision.holders} nodes draining, {decision.waiting} waiting: {decision.reason})",
            )
        return Outcome.wait(
            _retry_in_line(decision, request, now, self._policy),
            slot_waiting_since=record.slot_waiting_since or now,
            **found,
        )

    def _linked(self, record: LifecycleRecord, now: datetime) -> Outcome | None:
        """A terminate hook of an instance that a disruption without a hook (a Spot interruption, a
        rebalance recommendation, scheduled maintenance) drained or is draining: go on past the drain once that
        drain is over, rather than drain the node again (a slot and a wait for nothing). So too while the next
        maintenance's lifecycle waits on the record for its lead time: the drain for the one before it counts. Only a drain counts: a rebalance recommendation that
        this stack only cordons for evicted nothing, and the group's terminate hook that usually follows it
        must drain the node itself. Nor does a drain over while pods are on the node now (it timed out and
        left them, or the node was uncordoned after a maintenance and filled again, days before this hook):
        the hook drains the node itself, as if there had been no disruption."""
        for cause in LINKED_CAUSES:
            other = self._records.get(record_id(record.instance_id, cause, ""))
            if other is not None and other.drain_started_at is None:
                other = _earlier_drain(other)
            if (
                other is None
                or other.owner != record.owner
                or other.drain_started_at is None
                or Step.EVICT not in other.plan
            ):
                continue
            # (a drain at its cleanup is over: a maintenance's cleanup watches for the maintenance's end for hours)
            if not other.finished and other.step is not Step.CLEANUP:
                ends = other.drain_started_at + _full_drain(self._policy)
                if now > ends:
                    # That drain had all the time a drain takes, its timeout policy and load balancer delay
                    # included, and is not over: it is stuck (its messages dead-lettered, its resumes spent).
                    # The hook drains the node itself (its slot is the other's until that holder expires).
                    log.warning(
                        "instance %s: the drain for its %s, begun at %s, is not over: draining it for the hook",
                        record.instance_id,
                        cause.short,
                        other.drain_started_at,
                    )
                    return None
                log.info(
                    "instance %s is being drained for a %s: waiting for it", record.instance_id, cause.short
                )
                return Outcome.wait(LINKED_POLL_SECONDS)
            try:
                back = podfilter.to_evict(self._cluster.pods_on(other.node)) if other.node else []
            except Refused as refusal:
                # Whether pods came back cannot be told: drained as any node, whose drain settles refused
                # reads by its timeout policy, rather than failing here at every delivery
                log.error(
                    "instance %s: the pods of its node may not be listed: %s", record.instance_id, refusal
                )
                self._metrics.count("EvictionErrors")
                return None
            if back:
                log.info(
                    "instance %s was drained for a %s, but %d pods are on its node now: draining it again",
                    record.instance_id,
                    cause.short,
                    len(back),
                )
                return None
            log.info("instance %s was drained for a %s: completing at once", record.instance_id, cause.short)
            # what the plan does after its drain: its address released (the disruption's plan kept it, the
            # instance was still running), then the completion
            return Outcome.goto(
                settle_step(record),
                outcome=f"drained-by:{cause.short}",
                node=other.node,
                node_uid=other.node_uid,
                zone=other.zone,
            )
        return None


def _earlier_drain(record: LifecycleRecord) -> LifecycleRecord | None:
    """A lifecycle that has not begun a drain of its own (the next maintenance of the instance, waiting for its
    lead time) as the drain an earlier lifecycle on its record made and finished (EARLIER_DRAIN): the node it
    left cordoned and empty; None when there was none."""
    earlier = record.extra.get(EARLIER_DRAIN)
    if not isinstance(earlier, dict):
        return None
    return record.model_copy(
        update={
            "step": Step.DONE,
            "node": earlier.get("node"),
            "node_uid": earlier.get("node_uid"),
            "zone": earlier.get("zone"),
            "drain_started_at": datetime.fromisoformat(str(earlier["drain_started_at"])),
        }
    )


def _watching(record: LifecycleRecord, key: str, now: datetime) -> tuple[datetime, dict[str, Any]]:
    """When a watch after the cleanup began (its record.extra ``key``; now for its first look), and the
    changes that keep it going."""
    since = datetime.fromisoformat(str(record.extra.get(key) or now.isoformat()))
    return since, {"extra": {**record.extra, key: since.isoformat()}}


def _refused_while_time_runs(
    record: LifecycleRecord,
    node: str,
    uid: str | None,
    events: Events,
    metrics: Metrics,
    policy: DrainPolicy,
    *,
    what: str,
    marker: str,
    since: str,
    deadline: datetime,
    now: datetime,
    told: tuple[str, str],
    timed_out: str,
    outcome: str,
    found: Mapping[str, Any] | None = None,
) -> Outcome:
    """A drain the API server refuses ``what`` it needs (its cordon, its reads), logged by the caller: an error
    an operator must see (the eviction errors' alarm, and the Warning event ``told``: its reason and message,
    told once per drain, while record.extra's ``marker`` says since when it is refused), asked again at each
    poll while the drain's time runs. At its ``deadline`` the drain is over as one that could not finish: the
    action is settled with ``outcome`` (a DrainTimeout event says ``timed_out``), rather than held until its
    global timeout with its slot. ``found``: the changes the step found so far, kept either way."""
    found = found or {}
    metrics.count("EvictionErrors")  # the alarm: an operator must look
    if now >= deadline:
        log.warning("drain timeout with %s of node %s still refused: settling", what, node)
        metrics.count("DrainTimeouts")
        events.on_node(node, uid, "DrainTimeout", timed_out, warning=True)
        return Outcome.goto(settle_step(record), outcome=outcome, **found)
    extra = found.get("extra", record.extra)
    if marker not in extra:  # told once per drain: it is asked again at every poll
        reason, message = told
        events.on_node(node, uid, reason, message, warning=True)
    return Outcome.wait(policy.poll_seconds, **{**found, "extra": {**extra, marker: since}})


class Cordon:
    def __init__(
        self,
        *,
        finder: NodeFinder,
        cluster: Cluster,
        slots: Slots,
        dispatcher: Dispatcher,
        policy: DrainPolicy,
        metrics: Metrics,
        events: Events,
    ) -> None:
        self._finder = finder
        self._cluster = cluster
        self._slots = slots
        self._dispatcher = dispatcher
        self._policy = policy
        self._metrics = metrics
        self._events = events

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        found: dict[str, Any] = {}
        if record.node is None:  # a plan without a slot (a rebalance recommendation's cordon): find it here
            node, extra = self._finder.find(record)
            if node is None:
                return Outcome.goto(settle_step(record), outcome="node-not-found", extra=extra)
            found = {"node": node.name, "node_uid": node.uid, "zone": node.zone, "extra": extra}
        else:
            node = _node_still_the_instances(self._cluster, record)
        if node is None:
            return Outcome.goto(settle_step(record), outcome="node-gone")
        if node.owner not in (None, record.owner, record.extra.get(ADOPT_FROM)):
            log.warning("node %s was claimed by owner %s meanwhile: leaving it alone", node.name, node.owner)
            return Outcome.goto(settle_step(record), outcome=f"node-owned-by:{node.owner}")
        if node.owner is None and node.in_progress:
            log.info("adopting node %s: in progress with no owner", node.name)
        set_on_node = self._set_on_node(node, record)
        refused_since = record.extra.get(CORDON_REFUSED)
        if record.drain_started_at is not None and record.drain_deadline is not None:
            # claimed again by its drain (its node was registered again, see Evict): the drain keeps its time
            started, deadline = record.drain_started_at, record.drain_deadline
        else:
            # (a cordon the API server refused before: the drain's time runs since its first try; one that took
            # effect though the step failed: since then)
            started = (
                datetime.fromisoformat(str(refused_since))
                if refused_since
                else _cordoned_at(node, record, now)
            )
            deadline = min(started + self._policy.timeout, _deadline_cap(record, self._policy))
        if refused_since and Step.ACQUIRE_SLOT in record.plan:
            # asked again after a refusal, polls apart: the slot is renewed as a drain's polls renew it
            request = _slot_request(record, node.name, node.zone, **_precedence(record, now, self._policy))
            try:
                renewed = self._slots.renew(request)
            except Refused as refusal:
                # (RBAC on the budget ConfigMap): not cordoned without its slot confirmed, and settled at the
                # drain timeout as the refused cordon it still is, rather than failed at every poll
                why = f"its budget slot may not be renewed: {refusal}"
                return self._refused(record, node, why, started, deadline, now, found)
            _wake(self._dispatcher, renewed.wake)
            if not renewed.granted:
                log.warning("lost the budget slot of node %s before its cordon: waiting for one", node.name)
                self._metrics.count("BudgetSlotsLost")
                # Its drain's time starts again with its next slot: time spent waiting for one never counts
                # against a drain's timeout (the refusal is told again if the next cordon is refused too)
                found["extra"] = _without_refusal(found, record)
                return Outcome.goto(Step.ACQUIRE_SLOT, self._policy.budget_retry_seconds, **found)
        in_progress = json.dumps(
            {
                "instance": record.instance_id,
                "transition": record.transition.short,
                "token": record.token,
                "started": started.isoformat(),
                **set_on_node,
            },
            separators=(",", ":"),
        )
        try:
            claim = self._cluster.claim_node(
                node,
                owner=record.owner,
                in_progress=in_progress,
                cordon=True,
                exclude_from_lb=self._policy.exclude_from_load_balancers,
            )
        except Refused as refusal:
            return self._refused(record, node, str(refusal), started, deadline, now, found)
        if claim is Claim.CONFLICT:
            return Outcome.wait(1)  # the node changed under us: read it again and decide again
        if claim is Claim.GONE:
            return Outcome.goto(settle_step(record), outcome="node-gone")
        log.info("cordoned node %s", node.name)
        found["extra"] = {**_without_refusal(found, record), SET_ON_NODE: set_on_node}
        found["node_uid"] = node.uid
        self._events.on_node(
            node.name,
            node.uid,
            "Cordoned",
            f"Cordoned by nodecycle ({record.owner}) for the termination of {record.instance_id}: evicting "
            f"its pods until {deadline:%H:%M:%S}Z, then {self._policy.on_timeout}",
        )
        return Outcome.next(drain_started_at=started, drain_deadline=deadline, **found)

    def _refused(
        self,
        record: LifecycleRecord,
        node: NodeInfo,
        why: str,
        started: datetime,
        deadline: datetime,
        now: datetime,
        found: dict[str, Any],
    ) -> Outcome:
        """The API server will not cordon the node (an admission webhook that guards it, a role without patch
        on nodes): told and asked again at each poll as any refusal of what a drain needs (see
        :func:`_refused_while_time_runs`; the slot renewed, see above). Nothing of the node is disrupted
        meanwhile: no eviction without its cordon, or the pods' replacements are scheduled onto it again. At the
        drain timeout the action is settled, as both timeout policies end (the instance goes, with its pods);
        the force policy's deletes are left out, for the same reason as the evictions."""
        log.error("cordon of node %s refused: %s", node.name, why)
        return _refused_while_time_runs(
            record,
            node.name,
            node.uid,
            self._events,
            self._metrics,
            self._policy,
            what="the cordon",
            marker=CORDON_REFUSED,
            since=started.isoformat(),
            deadline=deadline,
            now=now,
            told=(
                "CordonRefused",
                f"Cordon by nodecycle ({record.owner}) for the termination of {record.instance_id} refused by "
                f"the API server: {why}; asked again until {deadline:%H:%M:%S}Z, then the drain times out",
            ),
            timed_out=(
                f"Drain timed out with its cordon refused since {started:%H:%M:%S}Z ({why}): nothing was "
                f"evicted; the lifecycle action of {record.instance_id} is completed"
            ),
            outcome="drain-timeout-cordon-refused",
            found=found,
        )

    def _set_on_node(self, node: NodeInfo, record: LifecycleRecord) -> dict[str, bool]:
        """What this claim sets on the node that was not there: the cordon, the load balancer exclusion. A
        node already in progress (this lifecycle's claim again, after a crash; or one adopted) keeps what its
        first claim said, which knew the node before any cordon of nodecycle's. A node the lifecycle before
        this one on the record left cordoned for it (still marked released for the record: nobody claimed it
        since) is taken over with what that one set (KEPT_ON_NODE), to be lifted when this one is over."""
        if node.in_progress:
            return _set_on_node(node.progress())
        fresh = {
            "cordon": not node.unschedulable,
            "lb": self._policy.exclude_from_load_balancers and not node.excluded_from_lb,
        }
        kept = record.extra.get(KEPT_ON_NODE)
        if node.released_for != record.id or not isinstance(kept, dict):
            return fresh
        inherited = _set_on_node(kept)
        return {what: fresh[what] or inherited[what] for what in fresh}


class Evict:
    def __init__(
        self,
        *,
        cluster: Cluster,
        slots: Slots,
        dispatcher: Dispatcher,
        instances: Instances,
        policy: DrainPolicy,
        metrics: Metrics,
        events: Events,
    ) -> None:
        self._cluster = cluster
        self._slots = slots
        self._dispatcher = dispatcher
        self._instances = instances
        self._policy = policy
        self._metrics = metrics
        self._events = events

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        try:
            return self._poll(record, now)
        except Refused as refusal:  # (evictions and deletes answer their refusals: only the polls' reads and
            # the slot's renewal raise one)
            return self._reads_refused(record, now, str(refusal))

    def _reads_refused(self, record: LifecycleRecord, now: datetime, why: str) -> Outcome:
        """The API server will not let the drain read its node, list its pods or renew its budget slot (RBAC
        edited for a while): the drain cannot tell what is left, or whether it may go on, so it neither evicts
        nor completes. Told and asked again as a refused cordon is (see :func:`_refused_while_time_runs`)."""
        node = _known(record.node, "node")
        deadline = _known(record.drain_deadline, "drain deadline")
        if record.drain_paused_at is not None:
            # Paused for its lost slot, and unable to tell whether it is back: still waiting, and a wait for a
            # slot is not drain time (as when the slot comes back: see _poll), up to where the timeout policy
            # must still act before the global timeout
            deadline = min(deadline + (now - record.drain_paused_at), _deadline_cap(record, self._policy))
        log.error("the drain of node %s is refused what it polls with: %s", node, why)
        return _refused_while_time_runs(
            record,
            node,
            record.node_uid,
            self._events,
            self._metrics,
            self._policy,
            what="the reads",
            marker=READS_REFUSED,
            since=str(record.extra.get(READS_REFUSED, now.isoformat())),
            deadline=deadline,
            now=now,
            told=(
                "DrainReadRefused",
                f"Drain by nodecycle ({record.owner}) of {record.instance_id} refused a read by the API server: "
                f"{why}; asked again until {deadline:%H:%M:%S}Z, then the drain times out",
            ),
            timed_out=(
                f"Drain timed out with the API server refusing its reads ({why}): the lifecycle action of "
                f"{record.instance_id} is completed"
            ),
            outcome="drain-timeout-reads-refused",
        )

    def _poll(self, record: LifecycleRecord, now: datetime) -> Outcome:
        node = _known(record.node, "node")
        policy = self._policy
        # The node by its name, at every poll, before the slot of that name is renewed: once it is gone, its
        # name may be another instance's node (a recycled private IP), whose pods are not ours to evict nor its
        # slot ours to hold
        found = self._cluster.get_node(node)
        if found is None:
            return self._node_deleted(record, now)
        info = _the_instances(found, record)
        if info is None:
            log.warning("node %s of %s is gone: nothing left to drain there", node, record.instance_id)
            return Outcome.goto(settle_step(record), outcome="node-gone")
        if None not in (info.uid, record.node_uid) and info.uid != record.node_uid:
            # The instance's kubelet registered its node again (the object was deleted: a new uid), without the
            # cordon and the annotations of the drain: pods would be scheduled there again. Claimed again.
            log.warning("node %s was registered again while draining: claiming it again", node)
            return Outcome.goto(Step.CORDON)
        # (near the global timeout, a paused drain takes its slot back as a waiter would: forced)
        request = _slot_request(
            record, node, record.zone, in_progress=True, **_precedence(record, now, policy)
        )
        renewed = self._slots.renew(request)
        _wake(self._dispatcher, renewed.wake)  # (as for a first ask: see AcquireSlot)
        if not renewed.granted:
            # Our holder expired and its slot went to another node: evicting now could exceed the budget. The
            # node waits with precedence (it is disruption in progress), and the wait is not drain time.
            log.warning("lost the budget slot of node %s: pausing the drain until it is back", record.node)
            self._metrics.count("BudgetSlotsLost")
            return Outcome.wait(policy.budget_retry_seconds, drain_paused_at=record.drain_paused_at or now)
        if renewed.reason is SlotReason.REACQUIRED or record.drain_paused_at is not None:
            # Someone removed our slot: its holder expired, or the stop of the instance outside the hooks freed
            # it (FORGET_NODE), leaving this drain to see for itself that it is over. A stopped instance's kubelet
            # is gone with it: its pods would stay Terminating, and this slot held, until the node controller
            # marks the node NotReady, most of a minute later. EC2 says at once. (A paused drain's slot comes
            # back by its own renewal, REACQUIRED, or passed on by another's release: then HELD.)
            state = self._instances.states([record.instance_id]).get(record.instance_id)
            if not up(state):
                log.warning(
                    "instance %s of node %s is %s: nothing left to drain there",
                    record.instance_id,
                    node,
                    state or "gone",
                )
                return Outcome.goto(settle_step(record), outcome="instance-down")
        changes: dict[str, Any] = {}
        deadline = _known(record.drain_deadline, "drain deadline")
        if record.drain_paused_at is not None:
            # the pause is not drain time, but the timeout policy must still act before the global timeout
            deadline = min(deadline + (now - record.drain_paused_at), _deadline_cap(record, policy))
            changes = {"drain_deadline": deadline, "drain_paused_at": None}
            log.info("the budget slot of node %s is back: the drain goes on until %s", node, deadline)
        pods = self._cluster.pods_on(node)
        left = podfilter.remaining(pods)
        stuck, why = self._stuck(info, left, now)
        if len(stuck) == len(left):
            base = "drained" if record.forced_at is None else "drain-timeout-forced"
            if stuck:
                log.warning(
                    "%d pods left terminating on node %s (%s): not waiting for them", len(stuck), node, why
                )
                self._metrics.count("PodsLeftTerminating", len(stuck))
                extra = {
                    **record.extra,
                    STUCK_PODS: {"why": why, "pods": [f"{p.namespace}/{p.name}" for p in stuck]},
                }
                record = record.model_copy(update={"extra": extra})
                base = f"{base}; {len(stuck)} pods left terminating ({why})"
            return self._drained(record, now, base, **changes)
        left = [pod for pod in left if pod not in stuck]
        polls = int(record.extra.get(POLLS, 0))
        if now >= deadline and polls > 0:  # every drain asks its pods to leave once, before any force
            return self._timed_out(record, now, left, **changes)
        cap = self._grace_cap(deadline, now)
        asked = podfilter.to_evict(pods) + podfilter.outlasting(left, cap, now)
        return self._ask_to_leave(record, asked, cap, deadline, now, **changes)

    def _ask_to_leave(
        self,
        record: LifecycleRecord,
        asked: list[PodInfo],
        cap: int,
        deadline: datetime,
        now: datetime,
        **changes: Any,
    ) -> Outcome:
        """One pass of evictions over ``asked`` (each pod's grace at most ``cap``), told and counted, then the
        wait for the next poll: the node's drain, or the pods still bound to a node deleted."""
        policy = self._policy
        polls = int(record.extra.get(POLLS, 0))
        evicted = 0
        throttled = 0.0  # how long the API server asked the next poll to wait, if it shed an eviction
        reported = set(record.extra.get(BLOCKED_REPORTED) or [])
        calls = _PodCalls(record, self._metrics)
        for pod, result in calls.answers(
            asked, lambda pod: self._cluster.evict(pod, podfilter.grace_for(pod, cap))
        ):
            if result.kind is Eviction.EVICTED:
                evicted += 1
            elif result.kind is Eviction.BLOCKED:
                self._metrics.count("EvictionsBlockedByPdb")
                if pod.uid not in reported:  # told once per pod and drain: it is retried at every poll
                    reported.add(pod.uid)
                    self._tell(
                        record, pod, "EvictionBlocked", f"blocked by a PodDisruptionBudget: {result.detail}"
                    )
            elif result.kind is Eviction.THROTTLED:
                # The API server sheds load (API Priority and Fairness), whichever pod is asked: asking the
                # others now only adds to it. They are asked at the next poll, once its Retry-After is over.
                log.warning(
                    "eviction of pod %s/%s throttled by the API server: the pass stops here (%s)",
                    pod.namespace,
                    pod.name,
                    result.detail,
                )
                self._metrics.count("EvictionsThrottled")
                throttled = retry_after_wait(result.retry_after, deadline - now)
                break
            elif result.kind is Eviction.MISCONFIGURED:
                log.error(
                    "pod %s/%s is selected by more than one PodDisruptionBudget", pod.namespace, pod.name
                )
                self._metrics.count("EvictionErrors")
            elif result.kind is Eviction.REFUSED and pod.terminating:
                # A pod on its way out, asked again only to shorten its grace, which the API server will not
                # evict (403 in a namespace being deleted: no new content there): it goes at its own pace, within
                # the drain's timeout policy (whose delete is no eviction); nothing for an operator to fix
                log.info(
                    "pod %s/%s, being deleted, is not evicted: %s", pod.namespace, pod.name, result.detail
                )
            elif result.kind is Eviction.REFUSED:
                # One pod refused must not leave the others on the node: they are evicted, this one is asked
                # again at every poll, and the drain's timeout policy decides what becomes of it
                log.error("eviction of pod %s/%s refused: %s", pod.namespace, pod.name, result.detail)
                self._metrics.count("EvictionErrors")  # the alarm: an operator must look
                if pod.uid not in reported:
                    reported.add(pod.uid)
                    self._tell(record, pod, "EvictionRefused", f"refused by the API server: {result.detail}")
        if evicted:
            self._metrics.count("PodsEvicted", evicted)
        # A pass counts even when calls of it failed: the drain's timeout then applies to the pods that never left
        extra = calls.remembered({**record.extra, POLLS: polls + 1})
        if reported:
            extra[BLOCKED_REPORTED] = sorted(reported)
        return Outcome.wait(
            max(_poll_delay(polls, policy.poll_seconds), throttled),
            pods_evicted=record.pods_evicted + evicted,
            extra=extra,
            **changes,
        )

    def _grace_cap(self, deadline: datetime, now: datetime) -> int:
        """A pod's grace never reaches past the drain's deadline (two minutes, for a Spot interruption), nor
        falls below what the timeout policy would give it anyway."""
        policy = self._policy
        return min(policy.pod_grace_cap, max(policy.force_grace, int((deadline - now).total_seconds())))

    def _node_deleted(self, record: LifecycleRecord, now: datetime) -> Outcome:
        """The node object is gone, and its pods may not be: a node deleted while its instance runs (``kubectl
        delete node``) leaves them bound to its name, running, until the pod garbage collector force-deletes
        them (40 s later), all at once, whatever their PodDisruptionBudgets say, and only then are they
        replaced; completing the action now would terminate the instance under them. So they are evicted, as
        on the node, and waited for until each is gone or past its deletion's deadline (a live kubelet stops
        them within their grace; with none, they stay until the garbage collector ends them), or until the
        drain's deadline; then the drain settles. No node has the name meanwhile, so no other instance's pod is
        bound to it."""
        node = _known(record.node, "node")
        deadline = _known(record.drain_deadline, "drain deadline")
        pods = podfilter.remaining(self._cluster.pods_on(node))
        asked = podfilter.to_evict(pods)
        stopping = [pod for pod in pods if pod.deletion_at is not None and now < pod.deletion_at]
        if not (asked or stopping) or now >= deadline:
            log.warning("node %s of %s is gone: nothing left to drain there", node, record.instance_id)
            return Outcome.goto(settle_step(record), outcome="node-gone")
        # The usual way a node object goes is its instance's termination (the cloud controller deletes it):
        # then no kubelet will stop these pods, an eviction asks nothing of a gone instance, and waiting for
        # their grace only holds the slot. EC2 says so at once (one call, only while pods are bound).
        state = self._instances.states([record.instance_id]).get(record.instance_id)
        if not up(state):
            log.warning(
                "node %s of %s is gone, its instance %s: nothing left to drain there",
                node,
                record.instance_id,
                state or "gone",
            )
            return Outcome.goto(settle_step(record), outcome="instance-down")
        log.warning(
            "node %s of %s is gone, %d of its pods still bound to it: evicting them, waiting for them to stop",
            node,
            record.instance_id,
            len(pods),
        )
        return self._ask_to_leave(record, asked, self._grace_cap(deadline, now), deadline, now)

    def _tell(
        self, record: LifecycleRecord, pod: PodInfo, reason: str, why: str, *, what: str = "Eviction"
    ) -> None:
        """A warning event on the pod and on its node: why its eviction (or ``what``) did not happen."""
        message = f"{what} of {pod.namespace}/{pod.name} {why}"
        self._events.on_pod(pod, reason, message, warning=True)
        self._events.on_node(_known(record.node, "node"), record.node_uid, reason, message, warning=True)

    def _stuck(self, node: NodeInfo, left: list[PodInfo], now: datetime) -> tuple[list[PodInfo], str]:
        """The pods of ``left`` that will never leave by themselves, and why: all those being deleted when
        the node's kubelet is gone (Ready Unknown: they stay Terminating until the node object goes; a kubelet
        that reports the node NotReady is there to stop them), else
        those still there well past their deletion's deadline. A pod force-deleted with a short grace makes
        the drain look at the node as soon as that grace is over, not only after ``CHECK_NODE_AFTER``."""
        deleting = [pod for pod in left if pod.deletion_at is not None]
        if not deleting:
            return [], ""
        overdue = any(
            (pod.deletion_at is not None and now > pod.deletion_at)
            or (pod.deletion_requested_at is not None and now - pod.deletion_requested_at > CHECK_NODE_AFTER)
            for pod in deleting
        )
        if overdue and node.kubelet_lost:
            return deleting, "node not ready"
        past = [
            pod for pod in deleting if pod.deletion_at is not None and now > pod.deletion_at + STUCK_AFTER
        ]
        return past, "past their deletion deadline"

    def _timed_out(
        self, record: LifecycleRecord, now: datetime, left: list[PodInfo], **changes: Any
    ) -> Outcome:
        policy = self._policy
        if record.forced_at is None:
            log.warning(
                "drain timeout with %d pods left on node %s: policy %s",
                len(left),
                record.node,
                policy.on_timeout,
            )
            self._metrics.count("DrainTimeouts")
            self._events.on_node(
                _known(record.node, "node"),
                record.node_uid,
                "DrainTimeout",
                f"Drain timed out with {len(left)} pods left ({', '.join(f'{p.namespace}/{p.name}' for p in left[:5])}"
                f"{', ...' if len(left) > 5 else ''}): timeout policy {policy.on_timeout}",
                warning=True,
            )
        if policy.on_timeout is TimeoutPolicy.CONTINUE:
            return self._drained(record, now, "drain-timeout-continued", **changes)
        forced_at = record.forced_at or now
        if now > forced_at + timedelta(seconds=policy.force_grace) + FORCED_POD_SLACK:
            log.error("%d pods did not stop after a forced delete: going on", len(left))
            return self._drained(record, now, "drain-timeout-forced-incomplete", **changes)
        # the pods not being deleted yet, and those someone else deletes with a longer grace than the force grace
        pods = [pod for pod in left if not pod.terminating]
        extra = self._force(record, pods + podfilter.outlasting(left, policy.force_grace, now))
        return Outcome.wait(policy.poll_seconds, forced_at=forced_at, extra=extra, **changes)

    def _force(self, record: LifecycleRecord, pods: list[PodInfo]) -> dict[str, Any]:
        """Delete the pods (the force policy); the record's extra after it. A delete the API server refuses is
        that pod's answer: the others are deleted, it is asked again at every poll until the force grace and
        its slack are over, and the eviction errors' alarm calls an operator."""
        calls = _PodCalls(record, self._metrics)
        told = set(record.extra.get(DELETION_REFUSED) or [])
        for pod, refusal in calls.answers(pods, self._delete):
            if refusal is None:
                continue
            log.error("forced delete of pod %s/%s refused: %s", pod.namespace, pod.name, refusal)
            self._metrics.count("EvictionErrors")
            if pod.uid not in told:
                told.add(pod.uid)
                self._tell(
                    record, pod, "DeletionRefused", f"refused by the API server: {refusal}", what="Deletion"
                )
        extra = calls.remembered(record.extra)
        if told:
            extra[DELETION_REFUSED] = sorted(told)
        return extra

    def _delete(self, pod: PodInfo) -> str | None:
        """Delete with the force grace; what the API server said if it refused."""
        try:
            self._cluster.delete_pod(pod, podfilter.grace_for(pod, self._policy.force_grace))
        except Refused as refusal:
            return str(refusal)
        return None

    def _drained(self, record: LifecycleRecord, now: datetime, outcome: str, **changes: Any) -> Outcome:
        """The node is empty. Before the next step, the optional load balancer delay: waited here, in pieces,
        because the budget slot must be renewed while the node is still in the load balancers' way."""
        extra = dict(record.extra)
        if DRAINED_AT not in extra:
            started = _known(record.drain_started_at, "drain start")
            took = (now - started).total_seconds()
            self._metrics.seconds("DrainDuration", took)
            log.info("node %s drained (%s)", record.node, outcome)
            extra[DRAINED_AT] = now.isoformat()
            self._events.on_node(
                _known(record.node, "node"),
                record.node_uid,
                "Drained",
                f"Drained in {took:.0f}s ({outcome}): {record.pods_evicted} pods evicted",
            )
        delay = self._policy.lb_deregistration_delay
        left = datetime.fromisoformat(str(extra[DRAINED_AT])) + delay - now
        if left <= timedelta(0):
            return Outcome.next(outcome=outcome, extra=extra, **changes)
        renew_every = self._policy.holder_ttl.total_seconds() / 3
        return Outcome.wait(min(left.total_seconds(), renew_every), outcome=outcome, extra=extra, **changes)


class Cleanup:
    """After completion: clear our annotations, give the slot back, wake whoever may use it now.

    A node comes back uncordoned when its instance is coming back: still in service because the action this
    lifecycle drained for was not Auto Scaling's to end (it was no longer active: completed elsewhere, timed
    out, or never issued) and the instance stayed; or into a warm pool, once nothing can be scheduled on it
    before it is back in service (see ``_hold``); or after scheduled maintenance (a reboot), once it is over
    and the instance stayed in service (see ``_lift_after_maintenance``).
    """

    def __init__(
        self,
        *,
        cluster: Cluster,
        slots: Slots,
        dispatcher: Dispatcher,
        autoscaling: Autoscaling,
        metrics: Metrics,
        events: Events,
        instances: MaintainedInstances,
        maintenance_poll_seconds: float = MAINTENANCE_POLL_SECONDS,
    ) -> None:
        self._cluster = cluster
        self._slots = slots
        self._dispatcher = dispatcher
        self._autoscaling = autoscaling
        self._metrics = metrics
        self._events = events
        self._instances = instances
        self._maintenance_poll_seconds = maintenance_poll_seconds

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        if record.node is None:
            return Outcome.next()
        if record.extra.get(POOL_WATCH):
            return self._lift_when_safe(record, now)
        if record.extra.get(MAINTENANCE_WATCH):
            return self._lift_after_maintenance(record, now)
        node = self._cluster.get_node(record.node)
        into_pool = record.transition.has_hook and record.destination == WARM_POOL
        # Drained for scheduled maintenance: whether the instance stays (a reboot) or goes (a stop, a
        # retirement), only the maintenance's end tells
        maintained = record.transition is Transition.SCHEDULED_CHANGE and record.drain_started_at is not None
        if node is not None:
            held = into_pool or maintained
            released = self._patched(
                node, record, lambda: self._hold(node, record) if held else self._release(node, record)
            )
            if released is Claim.CONFLICT:
                return Outcome.wait(1)
        gone = record.instance_id if record.extra.get(ENDS_ITS_INSTANCE) else None
        for waiter in self._slots.release(record.node, record.id, record.token, gone=gone):
            self._dispatcher.wake(waiter)
        # (told even when the node is gone already: its events are read by its name and uid)
        self._settled(record, node.uid if node is not None else record.node_uid)
        if into_pool:
            return self._lift_when_safe(record, now)
        if maintained:
            return self._lift_after_maintenance(record, now)
        return Outcome.next()

    def _patched(
        self, node: NodeInfo, record: LifecycleRecord, patch: Callable[[], Claim | None]
    ) -> Claim | None:
        """What ``patch`` of the node (this lifecycle's annotations cleared, its cordon lifted) answered; None
        when the API server refuses it (a webhook that guards the node, a role without patch on nodes). A
        refusal is an error an operator must see, as a refused cordon is, but it does not hold the lifecycle's
        end back: its slot is still given back, its watch ends. What it left on the node stays (the sweeper
        tries the annotations again; the cordon is the operator's to lift)."""
        try:
            return patch()
        except Refused as refusal:
            log.error("release of node %s refused: %s", node.name, refusal)
            self._metrics.count("EvictionErrors")  # the alarm: an operator must look
            self._events.on_node(
                node.name,
                node.uid,
                "ReleaseRefused",
                f"nodecycle ({record.owner}) could not clear its annotations of the lifecycle of "
                f"{record.instance_id}, nor lift what it set on the node: refused by the API server: {refusal}",
                warning=True,
            )
            return None

    def _hold(self, node: NodeInfo, record: LifecycleRecord) -> Claim | None:
        """Into the warm pool: clear this lifecycle's annotations and mark the node as released for it, but
        keep the cordon. Auto Scaling stops the instance only after the completion, and its node stays Ready
        for a minute after that: uncordoned now, it would take the very pods just evicted from it, which the
        stop then kills, without eviction or PodDisruptionBudget. (Freed by the stop already: marked.)"""
        if node.owner == record.owner and node.lifecycle in (None, record.id):
            return self._cluster.release_node(node, released_for=record.id)
        return None

    def _marked_node(self, record: LifecycleRecord) -> NodeInfo | None:
        """The instance's node while it is still marked released for this lifecycle (a watch's cordon is its
        own only so long: a later claim of the node removes the mark); None otherwise."""
        node = self._cluster.get_node(_known(record.node, "node"))
        if node is None or node.released_for != record.id or not _of_instance(node, record):
            return None
        return node

    def _lift_set(self, node: NodeInfo, record: LifecycleRecord) -> Claim | None:
        """Lift what this lifecycle set on the node (its SET_ON_NODE note: the cordon, the load balancer label),
        and its mark; None when the API server refuses it (told)."""
        undo = _set_on_node(record.extra.get(SET_ON_NODE) or {})
        return self._patched(
            node,
            record,
            lambda: self._cluster.release_node(node, uncordon=undo["cordon"], unlabel=undo["lb"]),
        )

    def _lift_when_safe(self, record: LifecycleRecord, now: datetime) -> Outcome:
        """Lift what this lifecycle set on the node once nothing can be scheduled on it before it is back in
        service: its kubelet is gone (NotReady: the node controller's taint keeps pods off), or the instance
        left the pool. Only while the node is still marked released for this lifecycle (a later claim of the
        instance's node removes the mark: that cordon is the later lifecycle's)."""
        node = self._marked_node(record)
        if node is None:
            return Outcome.next()
        since, watching = _watching(record, POOL_WATCH, now)
        state = self._autoscaling.lifecycle_state(record.instance_id)
        if state is None:
            # terminated from the pool (or taken out of the group): not coming back, its cordon stays
            log.info(
                "instance %s left its group from the warm pool: node %s stays cordoned",
                record.instance_id,
                node.name,
            )
            return Outcome.next()
        if not node.ready or not state.startswith("Warmed:"):
            lifted = self._lift_set(node, record)
            return Outcome.wait(1, **watching) if lifted is Claim.CONFLICT else Outcome.next()
        if now - since < timedelta(seconds=POOL_WATCH_SECONDS):
            return Outcome.wait(POOL_POLL_SECONDS, **watching)
        if not record.extra.get(POOL_IDLE):
            log.info(
                "instance %s waits in its warm pool running: node %s stays cordoned",
                record.instance_id,
                node.name,
            )
            self._events.on_node(
                node.name,
                node.uid,
                "CordonKeptInWarmPool",
                f"Instance {record.instance_id} waits in its warm pool running ({state}): the node stays "
                "cordoned until it leaves the pool, so that no pod runs on an instance out of service",
            )
        return Outcome.wait(POOL_IDLE_POLL_SECONDS, extra={**watching["extra"], POOL_IDLE: True})

    def _lift_after_maintenance(self, record: LifecycleRecord, now: datetime) -> Outcome:
        """Lift what this lifecycle set on the node once the maintenance it drained for is over and the
        instance stayed: EC2 no longer lists it as pending (carried out, or called off), or its window ended a
        margin ago; the instance runs, in service in its group; and its node is Ready again (a rebooted
        kubelet is back). Until then the cordon stays: the maintenance may still come, and a node whose kubelet
        is not back takes no pods. An instance that goes (stopped, retired, terminating, out of its group)
        keeps it: it is not coming back. Only while the node is still marked released for this lifecycle, as
        in the warm-pool watch (a later claim removes the mark: that cordon is the later lifecycle's). Not when
        the next maintenance's lifecycle follows on the record: it takes the cordon over (KEPT_ON_NODE), and
        lifts it once that maintenance is over too."""
        node = self._marked_node(record)
        if node is None:
            return Outcome.next()
        instance = record.instance_id
        if record.extra.get(SUCCESSOR):
            log.info(
                "instance %s has its next maintenance ahead: node %s stays cordoned", instance, node.name
            )
            return Outcome.next()
        _, watching = _watching(record, MAINTENANCE_WATCH, now)
        state = self._instances.states([instance]).get(instance)
        # (an instance of no group, tagged for this owner, has no group state to ask for)
        in_group = self._autoscaling.lifecycle_state(instance) if record.group else "InService"
        if not up(state) or in_group is None or in_group.startswith(LEAVING_STATES):
            why = f"instance {instance} is not coming back ({state or 'gone'}, {in_group})"
            return self._kept(node, record, why, watching)
        ahead = [
            event for event in self._instances.scheduled_events(instance) if _may_come(event, record, now)
        ]
        if not ahead and state == "running" and in_group == "InService" and node.ready:
            lifted = self._lift_set(node, record)
            if lifted is Claim.CONFLICT:
                return Outcome.wait(1, **watching)
            if lifted is None:
                return Outcome.next()  # refused: told, the cordon stays
            log.info(
                "the maintenance of %s is over and it stayed: node %s is uncordoned", instance, node.name
            )
            self._events.on_node(
                node.name,
                node.uid,
                "UncordonedAfterMaintenance",
                f"The scheduled maintenance of {instance} is over and the instance stayed in service: the "
                "cordon set for it is lifted",
            )
            return Outcome.next()
        if now > record.global_deadline + MAINTENANCE_WATCH_LIMIT:
            return self._kept(
                node,
                record,
                f"instance {instance} is not back in service with its node Ready ({state}, {in_group}, node "
                f"{'Ready' if node.ready else 'NotReady'}) {MAINTENANCE_WATCH_LIMIT} after its maintenance",
                watching,
                warning=True,
            )
        # before the window: asleep until it opens; in it or after it, a look every 12 drain polls
        opens = min((event.not_before for event in ahead), default=now)
        delay = max(self._maintenance_poll_seconds, (opens - now).total_seconds())
        return Outcome.wait(delay, **watching)

    def _kept(
        self,
        node: NodeInfo,
        record: LifecycleRecord,
        why: str,
        watching: dict[str, Any],
        *,
        warning: bool = False,
    ) -> Outcome:
        """The watch after a maintenance ends with the cordon kept: its mark goes (nothing on the node is this
        lifecycle's to lift any more), and the node tells why."""
        if self._patched(node, record, lambda: self._cluster.release_node(node)) is Claim.CONFLICT:
            return Outcome.wait(1, **watching)
        log.log(logging.WARNING if warning else logging.INFO, "node %s stays cordoned: %s", node.name, why)
        self._events.on_node(
            node.name,
            node.uid,
            "CordonKeptAfterMaintenance",
            f"The node stays cordoned after the scheduled maintenance of {record.instance_id}: {why}",
            warning=warning,
        )
        return Outcome.next()

    def _release(self, node: NodeInfo, record: LifecycleRecord) -> Claim | None:
        """Clear this lifecycle's annotations from the node, and lift its cordon if the node comes back; None
        when nothing on the node is this lifecycle's to release."""
        # Ours: annotated by this owner for this lifecycle. Node names are reused (recycled private IPs): a
        # late cleanup must not clear the annotations, nor free the slot, of a newer lifecycle of the name.
        ours = node.owner == record.owner and node.lifecycle in (None, record.id)
        # Or this instance's node that this lifecycle cordoned, whose annotations are gone: the stop of the
        # instance (into its warm pool) frees them at once (FORGET_NODE), and may come before this cleanup.
        # The cordon is still this lifecycle's to lift, as the stop's mark says, unless a later lifecycle of
        # the instance (back from the pool, now terminating for good) has claimed the node since: its claim
        # removed the mark, and a late cleanup of this one must leave that cordon alone.
        freed = (
            node.owner is None
            and node.in_progress is None
            and node.released_for == record.id
            and record.drain_started_at is not None
            and _of_instance(node, record)
        )
        if not (ours or freed):
            if (
                record.extra.get(ENDS_ITS_INSTANCE)
                and node.owner == record.owner
                and _of_instance(node, record)
            ):
                # Annotated by another lifecycle of this owner and instance, which the state change's FORGET_NODE
                # would clear: it does not run for an instance this lifecycle ends (see ENDS_ITS_INSTANCE)
                return self._cluster.release_node(node, released_for=node.lifecycle)
            return None
        back = self._coming_back(record)
        if not (ours or back):
            # freed already, and the cordon stays (the node is not coming back): only the stop's mark goes
            return self._cluster.release_node(node)
        if back:
            log.warning(
                "instance %s is still in service though its action is gone: node %s is uncordoned",
                record.instance_id,
                node.name,
            )
        # Only what this lifecycle set on the node (its claim's annotation says it too; a lifecycle from before
        # it was noted: both, as then)
        noted = record.extra.get(SET_ON_NODE)
        if not isinstance(noted, dict):
            noted = node.progress() if ours else {}
        undo = _set_on_node(noted)
        return self._cluster.release_node(node, uncordon=back and undo["cordon"], unlabel=back and undo["lb"])

    def _settled(self, record: LifecycleRecord, uid: str | None) -> None:
        node = _known(record.node, "node")
        if not record.transition.has_hook:
            return  # no action to tell of: the drain's own events told the story
        if record.completed_at is not None and not record.extra.get(SETTLED_ELSEWHERE):
            message = f"Completed the lifecycle action of {record.instance_id} with {record.result} ({record.outcome})"
            self._events.on_node(node, uid, "LifecycleActionCompleted", message)
        else:
            message = f"The lifecycle action of {record.instance_id} was no longer active ({record.outcome})"
            self._events.on_node(node, uid, "LifecycleActionGone", message, warning=True)

    def _coming_back(self, record: LifecycleRecord) -> bool:
        if not record.transition.has_hook:
            return False  # drained (or cordoned) for a disruption that comes: it stays cordoned
        gone = record.outcome in ("action-expired", "unknown-action") or record.extra.get(SETTLED_ELSEWHERE)
        return bool(gone) and self._autoscaling.lifecycle_state(record.instance_id) == "InService"


def _may_come(event: ScheduledEvent, record: LifecycleRecord, now: datetime) -> bool:
    """Whether ``event``, which EC2 lists as pending, is maintenance a node drained for the maintenance of
    ``record`` must stay cordoned for: one starting by that one's start (the one drained for, or one before
    it), or already begun, whose window has not ended a margin ago. One that starts later is the instance's next
    maintenance: the lifecycle that follows on the record, or starts it over, drains for it in its time."""
    if event.not_before > max(record.global_deadline, now):
        return False
    return event.not_after is None or now < event.not_after + MAINTENANCE_OVER_AFTER


class ForgetNode:
    """An instance stopped or terminated outside the hooks: free what nodecycle held for it at once (its
    slot, its waiting place, its node's annotations), rather than at the next sweep.

    Budget entries are this owner's of the instance (instance ids are never reused, unlike node names); the
    annotations those of this owner on the instance's node, whichever lifecycle set them. The cordon stays: a
    node that is not coming back keeps it, and one that is (stopped into the warm pool) has it lifted by the
    cleanup of the lifecycle that set it, which runs before or after this step.
    """

    def __init__(
        self,
        *,
        finder: NodeFinder,
        cluster: Cluster,
        slots: Slots,
        dispatcher: Dispatcher,
        instances: Instances,
    ) -> None:
        self._finder = finder
        self._cluster = cluster
        self._slots = slots
        self._dispatcher = dispatcher
        self._instances = instances

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        # Intake confirmed the instance down, but this step may run much later (a redelivery, a resume, a
        # dead-letter redrive): an instance up again since (back from its warm pool) may be in a newer
        # lifecycle, whose slot and annotations are not this one's to free
        state = self._instances.states([record.instance_id]).get(record.instance_id)
        if up(state):
            log.info(
                "instance %s is %s again since it went down at %s: nothing of it is freed (a late message)",
                record.instance_id,
                state,
                record.started_at,
            )
            return Outcome.next(outcome="instance-up-again")
        node, extra = self._finder.find(record)
        found: dict[str, Any] = {"extra": extra}
        if node is not None:
            found |= {"node": node.name, "node_uid": node.uid, "zone": node.zone}
            if (
                node.owner == record.owner
                and self._cluster.release_node(node, released_for=node.lifecycle) is Claim.CONFLICT
            ):
                return Outcome.wait(1, **found)
        for waiter in self._slots.forget(record.owner, record.instance_id):
            self._dispatcher.wake(waiter)
        log.info("instance %s went without a hook: its slot and annotations are freed", record.instance_id)
        return Outcome.next(outcome="instance-gone-without-hook", **found)
