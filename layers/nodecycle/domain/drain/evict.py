"""The drain's evictions: evict, then poll until the pods are gone; the timeout policy; the load balancer
delay."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from nodecycle.domain.budget import SlotDecision, SlotReason
from nodecycle.domain.budget.errors import WriteOutcomeUnknown
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain import pods as podfilter
from nodecycle.domain.drain.common import (
    STUCK_AFTER,
    _deadline_cap,
    _ended,
    _instance_down,
    _known,
    _node_as_seen,
    _precedence,
    _refused_while_time_runs,
    _seen,
    _slot_request,
    _the_instances,
    _until_deadline,
    _wake,
)
from nodecycle.domain.drain.orphans import NOTHING_CORDONED, holding, overdue
from nodecycle.domain.drain.pod_notes import BLOCKED, DELETION, FAILING, PodNotes
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import Contended, TransientError, retry_after_wait
from nodecycle.domain.flow import settle_step
from nodecycle.domain.model import (
    SPOT_ACTION,
    LifecycleRecord,
    Step,
    Transition,
)
from nodecycle.domain.policy import DrainPolicy, TimeoutPolicy
from nodecycle.domain.ports.budget import Slots
from nodecycle.domain.ports.cluster import (
    Cluster,
    Events,
    Eviction,
    EvictionResult,
    NodeInfo,
    PodInfo,
    Refused,
)
from nodecycle.domain.ports.instances import Instances
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

FORCED_POD_SLACK = timedelta(seconds=60)  # after a forced delete's grace: a pod still there is stuck
# Once the force policy has acted, how long past its deletion's deadline a pod being deleted is still waited for: a
# live kubelet has stopped it by then (SIGKILL at the deadline) and needs seconds to say so (its status, its final
# delete). Nothing is owed to the pod past its grace, so a longer wait only holds the slot, past the force grace
# and invariant 10's margin, on a node whose container runtime hangs (its kubelet alive: nothing else tells).
FORCED_STOP_SLACK = timedelta(seconds=10)
# A pod asked to go this long ago (or past its own deletion deadline, whichever comes first) and still there
# makes the drain look at its node: on a node whose kubelet is gone (Ready Unknown) pods being deleted never finish,
# and waiting for them only holds a budget slot; on one whose runtime is down (Ready False, "PLEG is not healthy")
# they are waited for until their grace is over. Until then the node is not read at all.
CHECK_NODE_AFTER = timedelta(seconds=15)
STUCK_PODS = "stuck_pods"  # record.extra key: pods the drain stopped waiting for, and why
# A pass over the pods stops calling after this many transient failures: one pod's call failing is that pod's
# trouble, more is the API server's, and each may have cost a read timeout of the step's minute. A budget's contention
# (Contended) is not counted: it is the budget's answer, not the server's trouble (see _PodCalls).
FAILURES_PER_PASS = 2
# A pod whose evictions fail at every try for this long is no blip (a webhook on evictions whose pods are gone, under
# failurePolicy Fail: 500 'failed calling webhook' until someone fixes it): told, and alarmed, as a refusal is
EVICTION_FAILING_FOR = timedelta(seconds=30)
# record.extra key: since when the API server refuses the drain what it polls with (its node, its pods, its
# budget slot's renewal: RBAC)
READS_REFUSED = "reads_refused"
# record.extra key: since when the drain's polls are refused before they renew its budget slot (its renewal refused,
# or a read before it). Its holder, last renewed before then, has expired a holder TTL later at the latest, and its
# slot may be another node's: from then on the drain waits for a slot, as one that lost it (see _reads_refused).
# Dropped by any poll not so refused (one that renewed the slot), so it never dates from an earlier refusal.
UNRENEWED = "slot_unrenewed_since"
# A pass tells of at most this many pods' refusals (a blocked or refused eviction, a refused delete: each an Event
# on the pod and one on its node, one request each); the others are told at the next passes. A pass over many
# refused pods would otherwise spend the step's time on Events against a slow API server.
TOLD_PER_PASS = 3
# A pass asks no other pod once less than this is left of its run's time (see Evict's ``time_left``)
PASS_END_SECONDS = 1.0
# record.extra key: the namespaces found being deleted, whose pods are no longer asked to leave (see _ask_to_leave)
ENDING_NAMESPACES = "ending_namespaces"
# record.extra key: for each of them, the latest creation (RFC 3339, the API server's clock) among its pods the drain
# asked to leave when it found it so. A namespace being deleted takes no new pod (kube-apiserver's NamespaceLifecycle
# admission refuses every create there), so a pod of it created later is of the namespace deleted and created again
# under its name (a GitOps controller recreating it) while the drain ran: asked to leave as any. One not noted (a
# drain's before this was kept, or pods without a creation): every pod of it is taken for the namespace's.
ENDING_SINCE = "ending_namespaces_created"
DRAINED_AT = "drained_at"  # record.extra key: when the node was found empty (the load balancer delay starts)
POLLS = "polls"  # record.extra key: how often the drain has looked for its pods so far
# record.extra key: the grace period (spec.terminationGracePeriodSeconds) of each pod on the node by uid, as a poll
# last listed them whole. Later polls list the pods' metadata only (their spec and status are most of their bytes),
# and list them whole again only when a pod not known here is on the node.
GRACES = "graces"
# record.extra key: by when the pods bound to the name of the drain's deleted node are stopped, as far as the polls
# have seen them (see _stopping_until)
ORPHANS_STOPPING = "orphans_stopping_until"
# record.extra key: by uid, the own deletion's deadline (RFC 3339) of each pod bound to a deleted node's name that
# someone else deletes with a longer grace than the drain's, whose shortening a pass did not get (refused, failed, not
# asked): its kubelet stops it at that deadline, even once podgc removed it from the API. Kept per pod, out of
# ORPHANS_STOPPING, so that a later pass whose shortening of it is taken drops it: folded into that latest moment,
# the drain waited for that deadline (up to its own) for a pod its kubelet stopped within the shorter grace
ORPHANS_UNSHORTENED = "orphans_unshortened_until"
# record.extra key: by uid, each pod bound to a deleted node's name that is being deleted, the grace of its deletion
# (deletionGracePeriodSeconds) and the earliest moment the drain knows that grace was given by: the pass that asked
# it, else the first poll that listed the pod with it. A deletion shortened by someone else has its deadline counted by
# the API server from the first delete (rest.BeforeDelete: the old deadline less the old grace, plus the new one; up
# to Kubernetes 1.32 possibly in the past, kubernetes#122646), while its kubelet restarts the pod's kill with the
# shorter grace from when it sees it: past that deadline, the pod may still be stopping for that grace from then, a
# moment no later than the poll that first saw the grace (see _overdue_stopping)
ORPHANS_DELETING = "orphans_deleting_seen"
# record.extra key: when a poll last found the drain's cordon undone and sent it back to be cordoned again
RECORDONED = "recordoned"


TimeLeft = Callable[[], float | None]


class _RenewalFailed(Exception):
    """The slot's renewal at a poll failed, or a read before it (``error``: the node's, or the list of the pods left
    bound to a deleted node's name): answered by :meth:`Evict._renewal_failing`."""

    def __init__(self, error: TransientError) -> None:
        super().__init__(str(error))
        self.error = error


def _poll_delay(polls: int, every: int) -> int:
    """1 s, 2 s, 4 s... up to the configured poll interval: most pods are gone within seconds, and a slot
    held by an empty node waiting for its next poll is a slot the budget's waiters cannot use."""
    return int(min(every, 2**polls))


class _PodCalls:
    """The calls of one pass over a drain's pods (its evictions, or the force policy's deletes), where a call
    that fails transiently (a read timeout, a 502-504) is that pod's failure, not the pass's: it is counted as a
    retry, the pod is asked again at a later poll, and the other pods are asked now. The pods that failed go
    last, the one that failed most recently the very last, so pods that always fail never stand in the way of
    the others, nor of one that failed once. A pass that runs out of its run's time ends there: the pods not asked
    yet are asked first at the next poll (they are not terminating; those asked are)."""

    def __init__(self, notes: PodNotes, metrics: Metrics, time_left: TimeLeft) -> None:
        self._notes = notes  # (where the pods' last failures are kept)
        self._metrics = metrics
        self._time_left = time_left
        # What a failure's Retry-After asked (a 429 of API Priority and Fairness, a 503 of a server going away):
        # the server's state, not the pod's, so the pass stops there and the next one waits that long. A pod's own
        # (Contended: its budget's status writes in conflict) holds that pod alone: the pass goes on, and the next
        # one waits that long too (the node cannot be empty before that pod is asked again)
        self.retry_after: float | None = None
        self.failures: list[tuple[PodInfo, TransientError]] = []  # this pass's failed calls, in order

    def answers[T](
        self, pods: Iterable[PodInfo], call: Callable[[PodInfo], T]
    ) -> Iterator[tuple[PodInfo, T]]:
        """Each pod and what ``call`` answered for it, up to the pass's ``FAILURES_PER_PASS``-th failure (a
        budget's contention not counted), but those of a controller one of whose pods met its budget's contention (not
        those being deleted, whose evictions no budget holds)."""
        listed = list(pods)
        order = self._notes.failure_order(pod.uid for pod in listed)  # (a pod gone has no failure to keep)
        failures = 0
        # The controllers of the pods whose budget answered Contended this pass. Each such answer comes about 10 s
        # late (kube-apiserver tries the budget's status write 20 times, 500 ms apart), and a controller's other pods
        # are under the same budget, in all likelihood: they are asked at the next poll (first: none of them failed),
        # not now. Counted as failures instead, two of a busy budget's pods stopped the pass before the node's other
        # pods, pass after pass while that budget had pods not asked yet (those go first), the others evicted a poll
        # and its Retry-After later for every two of them.
        # Not one being deleted: kube-apiserver evicts it without its budgets (canIgnorePDB: no status write, no
        # contention), at once, and that eviction shortens a deletion outlasting the drain's grace (left to the next
        # poll, a deleted node's pod podgc removes meanwhile is waited out for its own grace, its kubelet stopping it)
        contended: set[str] = set()
        for pod in sorted(listed, key=lambda pod: order.get(pod.uid, 0)):
            if pod.controller_uid in contended and not pod.terminating:
                continue
            left = self._time_left()
            if left is not None and left < PASS_END_SECONDS:
                log.warning(
                    "pass cut short, pods left to ask at the next poll: %.1f s left of this run's time",
                    max(0.0, left),
                )
                return
            try:
                answer = call(pod)
            except TransientError as error:
                log.warning("pod %s/%s: %s; asked again at the next poll", pod.namespace, pod.name, error)
                self._metrics.count("StepRetries", step=Step.EVICT.value)
                self._notes.failed(pod.uid)
                self.failures.append((pod, error))
                if error.retry_after is not None:
                    self.retry_after = max(self.retry_after or 0.0, error.retry_after)
                # (its budget's answer, not the server's trouble: not counted)
                if isinstance(error, Contended):
                    if pod.controller_uid is not None:
                        contended.add(pod.controller_uid)
                    continue
                failures += 1
                if error.retry_after is not None or failures == FAILURES_PER_PASS:
                    return
                continue
            self._notes.answered(pod.uid)
            yield pod, answer


def _ending_since(extra: dict[str, Any]) -> dict[str, datetime | None]:
    """ENDING_SINCE as the record keeps it (a namespace not noted, or unreadable: all its pods taken for its own)."""
    noted = extra.get(ENDING_SINCE)
    found: dict[str, datetime | None] = {}
    for namespace, at in (noted if isinstance(noted, dict) else {}).items():
        try:
            found[str(namespace)] = datetime.fromisoformat(at) if isinstance(at, str) else None
        except ValueError:
            found[str(namespace)] = None
    return found


def _of_ending(pod: PodInfo, ending: Collection[str], since: dict[str, datetime | None]) -> bool:
    """Whether ``pod`` is of a namespace the drain found being deleted, not of one created again under its name
    since: not created later than the pods that namespace had then (see ENDING_SINCE)."""
    if pod.namespace not in ending:
        return False
    latest = since.get(pod.namespace)
    return latest is None or pod.created_at is None or pod.created_at <= latest


def _unshortened(extra: dict[str, Any]) -> dict[str, datetime]:
    """ORPHANS_UNSHORTENED as the record keeps it (an entry unreadable: left out, as a record without it)."""
    noted = extra.get(ORPHANS_UNSHORTENED)
    found: dict[str, datetime] = {}
    for uid, at in (noted if isinstance(noted, dict) else {}).items():
        if isinstance(at, str):
            with suppress(ValueError):
                found[str(uid)] = datetime.fromisoformat(at)
    return found


def _noted_unshortened(
    extra: dict[str, Any],
    outlasting: Collection[PodInfo],
    shortened: Collection[str],
    now: datetime,
    stopping: Mapping[str, datetime],
) -> dict[str, Any]:
    """``extra`` noting in ORPHANS_UNSHORTENED each of ``outlasting`` this pass did not shorten at its own deadline
    (or, one past it, at ``stopping``'s moment for it: see _overdue_stopping), and dropping each it did shorten (its
    kubelet now stops it within the shorter grace, which ORPHANS_STOPPING holds) and each whose deadline is over."""
    kept = _unshortened(extra)
    for pod in outlasting:
        until = stopping.get(pod.uid, pod.deletion_at)
        if pod.uid in shortened:
            kept.pop(pod.uid, None)
        elif until is not None:
            kept[pod.uid] = max(until, kept.get(pod.uid, until))
    rest = {key: value for key, value in extra.items() if key != ORPHANS_UNSHORTENED}
    live = {uid: at.isoformat() for uid, at in kept.items() if at > now}
    return {**rest, ORPHANS_UNSHORTENED: live} if live else rest


def _deleting_seen(extra: dict[str, Any], pods: list[PodInfo], now: datetime) -> dict[str, list[Any]]:
    """ORPHANS_DELETING for ``pods``, those bound to a deleted node's name as a poll lists them now: for each being
    deleted with grace left, its grace and since when it has had it (as noted, when the grace is the one noted; else
    now). A pod not listed is dropped (gone: what it may still hold is in ORPHANS_STOPPING)."""
    noted = extra.get(ORPHANS_DELETING)
    noted = noted if isinstance(noted, dict) else {}
    seen: dict[str, list[Any]] = {}
    for pod in pods:
        if pod.deletion_at is None or not pod.deletion_grace:
            continue
        before = noted.get(pod.uid)
        since = now.isoformat()
        if isinstance(before, list) and len(before) == 2 and before[0] == pod.deletion_grace:
            with suppress(TypeError, ValueError):  # (unreadable: seen now)
                since = datetime.fromisoformat(before[1]).isoformat()
        seen[pod.uid] = [pod.deletion_grace, since]
    return seen


def _overdue_stopping(pods: list[PodInfo], seen: dict[str, list[Any]], now: datetime) -> dict[str, datetime]:
    """By when each of ``pods`` listed past its deletion's deadline, grace left (so not dropped by its kubelet yet),
    is stopped at the latest should its deletion have been shortened by someone else (see ORPHANS_DELETING): its
    grace from when the drain knows it had it. orphans.holding no longer counts such a pod (with no kubelet, none
    stops it: podgc ends it), but a live kubelet given a shorter grace stops it only that grace after the shortening,
    however long ago the deadline the API server counts from the first delete passed."""
    found: dict[str, datetime] = {}
    for pod in overdue(pods, now):
        if pod.uid not in seen:
            continue
        grace, since = seen[pod.uid]
        found[pod.uid] = datetime.fromisoformat(since) + timedelta(seconds=int(grace))
    return found


def _overdue_outlasting(
    pods: list[PodInfo], stopping: dict[str, datetime], cap: int, now: datetime
) -> list[PodInfo]:
    """Those of ``pods`` listed past their deletion's deadline (see _overdue_stopping: by uid, ``stopping``) whose
    kubelet may stop them later than one asked now with the grace ``cap`` allows them would: a deletion someone else
    shortened to a grace still longer than that. Asked again, the API server shortens it once more and the kubelet
    kills them within the cap from then, as it does a pod whose deadline is still to come (podfilter.outlasting);
    left alone, they held the drain to their own grace, past its deadline, where it settled node-gone with them
    still stopping."""
    return [
        pod
        for pod in overdue(pods, now)
        if pod.uid in stopping and stopping[pod.uid] > now + timedelta(seconds=podfilter.grace_for(pod, cap))
    ]


def _stopping_until(
    extra: dict[str, Any],
    left: list[PodInfo],
    cap: int,
    now: datetime,
    *,
    shortened: Collection[str] = (),
    overdue: Collection[datetime] = (),
) -> datetime | None:
    """By when the pods bound to a deleted node's name, ``left`` now (see orphans.holding), are stopped by their live
    kubelet should they go from the API now, and those gone before them (``extra``'s ORPHANS_STOPPING, as an earlier
    poll noted it): each pod being deleted at its deletion's deadline, any other within its grace (at most ``cap``)
    from now, as is one being deleted whose deletion this poll asks again with that grace (its uid in ``shortened``:
    someone else deleted it with a longer grace, which the API server shortens; noted at its own deadline, the
    drain, which keeps the latest moment any poll noted, waited until its own deadline for a pod stopped long before).
    Podgc force-deletes them all from the API once its quarantine is over (40 s after the node went, whatever their
    grace: gcOrphaned, kube-controller-manager's pkg/controller/podgc), and their kubelet, which sees them removed,
    goes on stopping them with their grace (HandlePodRemoves): their absence from the API is no sign that they have
    stopped. ``overdue``: by when those listed past their deletion's deadline are stopped (see _overdue_stopping).
    None: nothing noted, no pod left."""
    found = [
        *overdue,
        *(
            pod.deletion_at
            if pod.deletion_at is not None and pod.uid not in shortened
            else now + timedelta(seconds=podfilter.grace_for(pod, cap))
            for pod in left
        ),
    ]
    noted = extra.get(ORPHANS_STOPPING)
    if isinstance(noted, str):
        with suppress(ValueError):  # (unreadable: what the pods left say)
            found.append(datetime.fromisoformat(noted))
    return max(found, default=None)


def _maybe_down(record: LifecycleRecord, node: NodeInfo) -> bool:
    """Whether the drain asks EC2 if the instance is down, at a poll whose slot is still its own: the drain of a
    disruption without a hook whose node's kubelet is gone (Ready Unknown), or of a Spot interruption that hibernates
    the instance. EC2 gives no two minutes before a hibernation, which begins with the warning ("you receive an
    interruption notice, but you do not receive a two-minute warning because the hibernation process begins
    immediately": EC2 User Guide, Spot Instance interruption notices), and the stop it tells of (FORGET_NODE's, which
    frees the slot) may come before the drain took its slot. Unasked, the drain evicted from a node already down until
    its timeout: its pods, NotReady with their kubelet, count as unhealthy to their PodDisruptionBudget, which then
    refused every eviction; the forced slot was held the two minutes, and the timeout policy applied (DrainTimeouts
    paged) for nothing left to drain. One DescribeInstances per poll, on such drains only: not a hook's, whose
    instance Auto Scaling holds running (an outage that takes many kubelets at once would have every terminate
    drain ask EC2 at every poll, against EC2's request rate limits that the address steps share)."""
    if record.transition is Transition.SPOT_INTERRUPTION and record.extra.get(SPOT_ACTION) == "hibernate":
        return True
    return node.kubelet_lost and not record.transition.has_hook


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
        time_left: TimeLeft,
    ) -> None:
        """``time_left``: the seconds this run may still spend on the pass's calls (the function's time less what
        the engine needs after the step; None: no end). A pass that would outlast it ends, re-queued as a poll:
        a function killed mid-pass commits nothing, and its message comes back only after the queue's visibility
        timeout."""
        self._cluster = cluster
        self._slots = slots
        self._dispatcher = dispatcher
        self._instances = instances
        self._policy = policy
        self._metrics = metrics
        self._events = events
        self._time_left = time_left

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        try:
            outcome = self._poll(record, now)
        except Refused as refusal:  # (evictions and deletes answer their refusals: only the polls' reads and
            # the slot's renewal raise one; those after the renewal are answered in _poll)
            return self._reads_refused(record, now, str(refusal))
        except _RenewalFailed as failed:
            return self._renewal_failing(record, now, failed.error)
        if UNRENEWED not in record.extra:
            return outcome
        # (a poll not refused before its renewal: the slot renewed, or the drain gone on without it; dropped either
        # way, a later refusal dates the slot's end from itself, never earlier than it could be)
        extra = outcome.changes.get("extra", record.extra)
        kept = {key: value for key, value in extra.items() if key != UNRENEWED}
        return replace(outcome, changes={**outcome.changes, "extra": kept})

    def _deadline_now(self, record: LifecycleRecord, now: datetime) -> datetime:
        """The drain's deadline as of ``now``: a pause for a lost slot is not drain time, up to where the
        timeout policy must still act before the global timeout."""
        deadline = _known(record.drain_deadline, "drain deadline")
        if record.drain_paused_at is not None:
            deadline = min(deadline + (now - record.drain_paused_at), _deadline_cap(record, self._policy))
        return deadline

    def _reads_refused(
        self, record: LifecycleRecord, now: datetime, why: str, *, renewed: bool = False, **changes: Any
    ) -> Outcome:
        """The API server will not let the drain read its node, list its pods or renew its budget slot (RBAC
        edited for a while; the budget ConfigMap crowded out, immutable or gone): the drain cannot tell what is
        left, or whether it may go on, so it neither evicts nor completes. Told and asked again as a refused cordon
        is (see :func:`_refused_while_time_runs`). ``renewed``: the slot was renewed at this poll, before the
        refused read. Refused before its renewal for a holder TTL, the drain has lost its slot for certain (its
        holder expired, and another node may be granted it): from then on it is paused as for a lost slot, its
        wait for a slot not drain time (invariant 9), up to where its timeout policy must still act before the
        global timeout (its deadline's cap). Its drain time ran while the slot was still its own. ``changes``: what
        the poll found before the refusal (its pause ended by the slot back), kept."""
        record = record.model_copy(update=changes)
        node = _known(record.node, "node")
        extra = {key: value for key, value in record.extra.items() if key != UNRENEWED}
        paused_at = record.drain_paused_at
        if not renewed:
            since = datetime.fromisoformat(str(record.extra.get(UNRENEWED, now.isoformat())))
            extra[UNRENEWED] = since.isoformat()
            lost = since + self._policy.holder_ttl
            if paused_at is None and now >= lost:
                log.warning(
                    "the budget slot of node %s expired unrenewed at %s: pausing the drain", node, lost
                )
                paused_at = lost
        found: dict[str, Any] = {**changes, "extra": extra}
        if paused_at != record.drain_paused_at:
            found["drain_paused_at"] = paused_at
        # (paused for its lost slot, and unable to tell whether it is back: still waiting, and a wait for a slot is
        # not drain time, as when the slot comes back: see _poll)
        deadline = self._deadline_now(record.model_copy(update={"drain_paused_at": paused_at}), now)
        log.error("the drain of node %s is refused what it polls with: %s", node, why)
        cap = _deadline_cap(record, self._policy)
        outcome = _refused_while_time_runs(
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
                f"{why}; asked again until {deadline:%H:%M:%S}Z (its slot lost unrenewed meanwhile, a wait for a "
                f"slot up to {cap:%H:%M:%S}Z), then the drain times out",
            ),
            timed_out=f"Drain timed out with the API server refusing its reads ({why}): {_ended(record)}",
            outcome="drain-timeout-reads-refused",
            found=found,
        )
        if paused_at is None or not outcome.again:
            return outcome
        # (paused, it asks again at the waiters' cadence, as a drain that lost its slot does, not at each poll for
        # what may be hours up to its cap; never past its deadline)
        wait = min(self._policy.budget_retry_seconds, max(outcome.delay, (deadline - now).total_seconds()))
        return replace(outcome, delay=wait)

    def _renewal_failing(self, record: LifecycleRecord, now: datetime, error: TransientError) -> Outcome:
        """The budget ConfigMap's reads or writes fail at the slot's renewal (5xx, throttling, conflicts past the
        store's retries), or a read before it (the node's, a deleted node's pods): nothing is evicted without the slot. Failing for a holder TTL since the last try that may
        have renewed it (the first failure in a row, noted from its first retry; a write whose answer was lost,
        WriteOutcomeUnknown, may have landed: from it), the drain's holder has expired and its slot may be another node's: from then on the
        drain is paused as for a lost slot, its wait for a slot not drain time (invariant 9), up to its
        deadline's cap, asking at the waiters' cadence. Before that its slot is still its own and its time runs
        (invariant 10). Raised instead, the engine's retries kept no note of since when, and past its deadline
        the drain ended (``_timed_out_unlisted``) beside the node its expired slot was granted to (invariant 1).
        Past its deadline, as moved, the timeout policy acts on what can be known, disrupting nothing."""
        node = _known(record.node, "node")
        extra = dict(record.extra)
        noted = extra.get(UNRENEWED)
        if noted is None and record.attempts == 0 and now < self._deadline_now(record, now):
            # (a first failure, a blip most often: the engine's retry, as any step's; from its retry on, which
            # comes after it, since when is noted: later than the first failure, never earlier than it could be)
            raise error
        unknown = isinstance(error, WriteOutcomeUnknown) or noted is None
        since = now if unknown else datetime.fromisoformat(str(noted))
        extra[UNRENEWED] = since.isoformat()
        changes: dict[str, Any] = {}
        paused_at = record.drain_paused_at
        lost = since + self._policy.holder_ttl
        if paused_at is None and now >= lost:
            log.warning("the budget slot of node %s expired unrenewed at %s: pausing the drain", node, lost)
            self._metrics.count("BudgetSlotsLost")
            paused_at = changes["drain_paused_at"] = lost
        record = record.model_copy(update={"extra": extra, "drain_paused_at": paused_at})
        deadline = self._deadline_now(record, now)
        if now >= deadline:
            return self._timed_out_unlisted(record, now, error, **changes)
        log.warning("the budget slot of node %s cannot be renewed: %s", node, error)
        wait = max(self._policy.poll_seconds, retry_after_wait(error.retry_after))
        if paused_at is not None:  # (a waiter's cadence, as a drain that lost its slot asks)
            wait = max(wait, self._policy.budget_retry_seconds)
        return Outcome.wait(max(1.0, min(wait, (deadline - now).total_seconds())), extra=extra, **changes)

    def _poll(self, record: LifecycleRecord, now: datetime) -> Outcome:
        node = _known(record.node, "node")
        policy = self._policy
        # The node by its name, at every poll, before the slot of that name is renewed: once it is gone, its
        # name may be another instance's node (a recycled private IP), whose pods are not ours to evict nor its
        # slot ours to hold
        try:
            found, whole = _node_as_seen(self._cluster, record, node)
        except TransientError as error:
            # (an API server that fails every read, its etcd overloaded: this read is each poll's first call, so a
            # drain past its timeout would otherwise be retried until its global timeout, its policy never applied;
            # and before its slot's renewal, which it keeps from the slot as a failing renewal does)
            raise _RenewalFailed(error) from error
        if found is None:
            return self._node_deleted(record, now)
        info = _the_instances(found, record)
        if info is None:
            log.warning("node %s of %s is gone: nothing left to drain there", node, record.instance_id)
            return Outcome.goto(settle_step(record), outcome="node-gone")
        if (
            None not in (info.uid, record.node_uid) and info.uid != record.node_uid
        ) or NOTHING_CORDONED in record.extra:
            # The instance's kubelet registered its node again (the object was deleted: a new uid), without the
            # cordon and the annotations of the drain: pods would be scheduled there again. Claimed again. (Or
            # registered after a deletion the cordon found, which claimed nothing: claimed now.)
            log.warning("node %s was registered again while draining: claiming it again", node)
            return Outcome.goto(Step.CORDON)
        if info.lifecycle == record.id and not info.unschedulable:
            # Someone undid this drain's cordon (kubectl uncordon): the scheduler may place the evicted pods'
            # replacements on it again, each to be evicted again up to the timeout. Cordoned again first; the
            # claim keeps the drain's time and what its first claim set on the node (see Cordon). Not past the
            # drain's timeout: a tool that undoes every cordon at once (a GitOps controller that self-heals the
            # node's spec) would send each poll back to the cordon, and the drain would never reach its timeout
            # policy, held until the action's global timeout. Past it, the policy applies to the node as it is.
            if now < self._deadline_now(record, now):
                log.warning("node %s was uncordoned while draining: cordoning it again", node)
                # (undone again soon after the last cordon: a fight, paced at the poll interval rather than a cordon,
                # a PATCH and an Event, at every turn)
                last = record.extra.get(RECORDONED)
                fight = last is not None and now - datetime.fromisoformat(str(last)) < 2 * timedelta(
                    seconds=policy.poll_seconds
                )
                # (the pods placed on it meanwhile are the drain's too: its first list is taken again)
                extra = {**podfilter.relisted(record.extra), RECORDONED: now.isoformat()}
                return Outcome.goto(Step.CORDON, policy.poll_seconds if fight else 0, extra=extra)
            log.warning("node %s was uncordoned past the drain's timeout: its timeout policy applies", node)
        if whole:
            record = record.model_copy(update={"extra": _seen(record.extra, info)})
        try:
            renewed, paused = self._renew_slot(record, node, now)
        except TransientError as error:
            raise _RenewalFailed(error) from error
        if paused is not None:
            return paused
        if (
            renewed.reason is SlotReason.REACQUIRED
            or record.drain_paused_at is not None
            or _maybe_down(record, info)
        ):
            # Someone removed our slot: its holder expired, or the stop of the instance outside the hooks freed
            # it (FORGET_NODE), leaving this drain to see for itself that it is over. A stopped instance's kubelet
            # is gone with it: its pods would stay Terminating, and this slot held, until the node controller
            # marks the node NotReady, most of a minute later. EC2 says at once. (A paused drain's slot comes
            # back by its own renewal, REACQUIRED, or passed on by another's release: then HELD.) Or the instance
            # may have gone without anyone freeing the slot (see _maybe_down).
            down = _instance_down(self._instances, record)
            if down is not None:
                log.warning(
                    "instance %s of node %s is %s: nothing left to drain there",
                    record.instance_id,
                    node,
                    down,
                )
                return Outcome.goto(settle_step(record), outcome="instance-down")
        changes: dict[str, Any] = {}
        deadline = _known(record.drain_deadline, "drain deadline")
        if record.drain_paused_at is not None:
            # the pause is not drain time, but the timeout policy must still act before the global timeout
            deadline = min(deadline + (now - record.drain_paused_at), _deadline_cap(record, policy))
            changes = {"drain_deadline": deadline, "drain_paused_at": None}
            log.info("the budget slot of node %s is back: the drain goes on until %s", node, deadline)
        try:
            pods, graces = self._pods_on(record, node)
        except TransientError as error:
            if now < deadline:
                raise  # (retried by the engine: the drain's timeout still ahead)
            return self._timed_out_unlisted(record, now, error, **changes)
        except Refused as refusal:  # (its slot renewed: held, its drain time running, a pause over)
            return self._reads_refused(record, now, str(refusal), renewed=True, **changes)
        if graces is not None:
            record = record.model_copy(update={"extra": {**record.extra, GRACES: graces}})
        # The drain's pods are those on the node at its cordon; those placed there after it are left alone, told
        extra = podfilter.first_listed(record.extra, pods)
        cordoned = podfilter.Cordoned.of(info, extra)
        record = record.model_copy(update={"extra": self._placed_after(record, pods, cordoned, extra)})
        left = podfilter.remaining(pods, cordoned)
        stuck, why = self._stuck(info, left, now, past_deadline=now >= deadline, forced_at=record.forced_at)
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
        asked = podfilter.to_evict(pods, cordoned) + podfilter.outlasting(left, cap, now)
        return self._ask_to_leave(record, asked, cap, deadline, now, **changes)

    def _placed_after(
        self,
        record: LifecycleRecord,
        pods: list[PodInfo],
        cordoned: podfilter.Cordoned,
        extra: dict[str, Any],
    ) -> dict[str, Any]:
        """``extra`` noting the pods placed on the node after its cordon (see drain/pods.py), each counted
        (PodsPlacedAfterCordon) and told on the node once per drain: neither evicted nor waited for, they stop with
        the instance, and only an operator can tell whether that is what their owner meant (a toleration of every
        taint is often meant for NoExecute taints only)."""
        new, extra = podfilter.untold(podfilter.placed_after(pods, cordoned), extra)
        if not new or cordoned.at is None:
            return extra
        names = ", ".join(f"{p.namespace}/{p.name}" for p in new[:5]) + (", ..." if len(new) > 5 else "")
        log.warning(
            "%d pods placed on node %s after its cordon, left alone: %s", len(new), record.node, names
        )
        self._metrics.count("PodsPlacedAfterCordon", len(new))
        self._events.on_node(
            _known(record.node, "node"),
            record.node_uid,
            "PodsPlacedAfterCordon",
            f"{len(new)} pods placed on the node after its cordon at {cordoned.at:%H:%M:%S}Z (they tolerate "
            f"node.kubernetes.io/unschedulable, or were bound to it by name), not evicted nor waited for by the "
            f"drain of nodecycle ({record.owner}): they stop with the instance: {names}",
            warning=True,
        )
        return extra

    def _pods_on(
        self, record: LifecycleRecord, node: str
    ) -> tuple[list[PodInfo], dict[str, int | None] | None]:
        """The pods on the node, and their graces by uid when they were listed whole (None: by their metadata,
        each pod's grace known from an earlier whole list)."""
        graces = record.extra.get(GRACES)
        if isinstance(graces, dict):
            listed = self._cluster.pod_metadata_on(node)
            if all(pod.uid in graces for pod in listed):
                return [pod.model_copy(update={"grace_period": graces[pod.uid]}) for pod in listed], None
        pods = self._cluster.pods_on(node)
        return pods, {pod.uid: pod.grace_period for pod in pods}

    def _ask_to_leave(
        self,
        record: LifecycleRecord,
        asked: list[PodInfo],
        cap: int,
        deadline: datetime,
        now: datetime,
        *,
        outlasting: Collection[PodInfo] = (),
        overdue_until: Mapping[str, datetime] | None = None,
        deleting: bool = False,
        **changes: Any,
    ) -> Outcome:
        """One pass of evictions over ``asked`` (each pod's grace at most ``cap``), told and counted, then the
        wait for the next poll: the node's drain, or the pods still bound to a node deleted (``deleting``: each pod
        whose deletion this pass asked, or shortened, noted in ORPHANS_DELETING with its grace as of now). ``outlasting``: those
        of a deleted node's pods, among ``asked``, whose deletion by someone else outlasts the cap, noted in
        ORPHANS_STOPPING as stopped within the cap (see _stopping_until): one this pass did not shorten after all
        (its eviction refused by a webhook, failed, gone from the API, or not asked: the pass cut short) is noted at
        its own deletion's deadline, which its kubelet keeps to once podgc has removed it from the API, until a later
        pass shortens it (ORPHANS_UNSHORTENED); one listed past that deadline, at ``overdue_until``'s moment for it
        (see _overdue_stopping)."""
        policy = self._policy
        polls = int(record.extra.get(POLLS, 0))
        evicted = 0
        # How long the API server asked the next poll to wait (Retry-After): it shed an eviction, or a budget is
        # still being processed. The node cannot be empty before that pod is asked again, so polling sooner only
        # adds requests
        asked_wait = 0.0
        notes = PodNotes(record.extra)
        notes.keep_only(pod.uid for pod in asked)  # (the pods not asked any more are gone, or leaving)
        told = 0  # pods whose refusal this pass told of
        ending = set(record.extra.get(ENDING_NAMESPACES) or [])
        ending_since = _ending_since(record.extra)
        calls = _PodCalls(notes, self._metrics, self._time_left)
        shortened: set[str] = set()  # the pods being deleted whose deletion this pass shortened to the cap
        given: dict[
            str, int
        ] = {}  # the pods whose deletion this pass asked or shortened, and the grace it gave

        def tell_once(pod: PodInfo, reason: str, message: str) -> None:
            """Tell of ``pod``'s refusal once per pod and drain, a few per pass: it is asked again at every poll."""
            nonlocal told
            if not notes.told(pod.uid, BLOCKED) and told < TOLD_PER_PASS:
                notes.tell(pod.uid, BLOCKED)
                told += 1
                self._tell(record, pod, reason, message)

        def ask(pod: PodInfo) -> EvictionResult:
            grace = podfilter.grace_for(pod, cap)
            # (its namespace answered: no eviction is accepted there any more)
            if _of_ending(pod, ending, ending_since):
                result = EvictionResult(Eviction.NAMESPACE_TERMINATING, "its namespace is being deleted")
            else:
                result = self._cluster.evict(pod, grace)
            if result.kind is Eviction.NAMESPACE_TERMINATING and pod.terminating:
                if self._shorten(pod, grace):
                    shortened.add(pod.uid)
                    given[pod.uid] = grace
            elif result.kind is Eviction.EVICTED:
                given[pod.uid] = grace
                if pod.terminating:
                    shortened.add(
                        pod.uid
                    )  # (an eviction of a pod being deleted is that delete with its grace)
            return result

        answered: set[str] = set()
        unprocessed: list[tuple[PodInfo, str]] = []  # pods whose budget is still being processed, this pass
        for pod, result in calls.answers(asked, ask):
            answered.add(pod.uid)
            if result.kind is Eviction.EVICTED:
                evicted += 1
            elif result.kind is Eviction.BLOCKED:
                self._metrics.count("EvictionsBlockedByPdb")
                if result.retry_after:  # (a Retry-After of 0 is no wait)
                    # A budget just created or edited, not yet observed by its controller: it answers within
                    # seconds, and what it then says (room, or how many pods it needs) is what is told, once. Its
                    # pod is asked again no sooner than the server said (10 s), as client-go's retry would
                    asked_wait = max(asked_wait, retry_after_wait(result.retry_after, deadline - now))
                    unprocessed.append((pod, result.detail))
                    log.info(
                        "eviction of pod %s/%s waits for its budget: %s",
                        pod.namespace,
                        pod.name,
                        result.detail,
                    )
                else:
                    tell_once(pod, "EvictionBlocked", f"blocked by a PodDisruptionBudget: {result.detail}")
            elif result.kind is Eviction.DEFERRED:
                # An admission webhook's "not now" for this pod (429: KubeVirt's, while it moves the pod's VM away
                # first): its answer alone, as a budget's block is, so the pass goes on with the other pods (each
                # VM's pod asked, each VM moving meanwhile), and the pod is asked again at the next polls, no sooner
                # than a Retry-After it gave, until it goes or the drain's timeout policy acts. The webhook's design,
                # not an operator's to fix: told once, no alarm
                log.info(
                    "eviction of pod %s/%s deferred by the API server: %s",
                    pod.namespace,
                    pod.name,
                    result.detail,
                )
                asked_wait = max(asked_wait, retry_after_wait(result.retry_after, deadline - now))
                tell_once(
                    pod,
                    "EvictionDeferred",
                    f"deferred by the API server: {result.detail}; asked again until the drain's timeout",
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
                asked_wait = max(asked_wait, retry_after_wait(result.retry_after, deadline - now))
                break
            elif result.kind is Eviction.NAMESPACE_TERMINATING:
                # Its namespace is being deleted: the API server takes no eviction there, and the namespace
                # controller deletes the pod (with its own grace). Nothing an operator could fix (no alarm), nor
                # anything to tell (the API server takes no Event there either): it is waited for as a pod being
                # deleted, within the drain's timeout policy (a delete is taken there), and neither it nor its
                # namespace's other pods are asked again
                if not _of_ending(pod, ending, ending_since):  # (found now: a namespace, or its new namesake)
                    log.info(
                        "pods of namespace %s, being deleted, are not evicted: its namespace controller deletes "
                        "them (%s)",
                        pod.namespace,
                        result.detail,
                    )
                    ending.add(pod.namespace)
                    created = [p.created_at for p in asked if p.namespace == pod.namespace and p.created_at]
                    ending_since[pod.namespace] = max(created, default=None)
            elif result.kind is Eviction.REFUSED and pod.terminating:
                # A pod on its way out, asked again only to shorten its grace, which the API server will not
                # evict (an admission webhook): it goes at its own pace, within the drain's timeout policy (whose
                # delete is no eviction); nothing for an operator to fix
                log.info(
                    "pod %s/%s, being deleted, is not evicted: %s", pod.namespace, pod.name, result.detail
                )
            elif result.kind in (Eviction.REFUSED, Eviction.MISCONFIGURED):
                # One pod refused must not leave the others on the node: they are evicted, this one is asked
                # again at every poll, and the drain's timeout policy decides what becomes of it. Told as any
                # refusal: a pod two PodDisruptionBudgets select (500, whatever they allow: a namespace-wide budget
                # beside its app's own) is the refusal an operator meets most, and only an operator ends it
                if result.kind is Eviction.MISCONFIGURED:
                    log.error(
                        "pod %s/%s is selected by more than one PodDisruptionBudget: %s",
                        pod.namespace,
                        pod.name,
                        result.detail,
                    )
                else:
                    log.error("eviction of pod %s/%s refused: %s", pod.namespace, pod.name, result.detail)
                self._metrics.count("EvictionErrors")  # the alarm: an operator must look
                tell_once(pod, "EvictionRefused", f"refused by the API server: {result.detail}")
        if evicted:
            self._metrics.count("PodsEvicted", evicted)
        self._failing(record, notes, calls, unprocessed, answered, asked, told, now)
        # A pass counts even when calls of it failed: the drain's timeout then applies to the pods that never left
        asked_wait = max(asked_wait, retry_after_wait(calls.retry_after, deadline - now))
        extra = notes.into({**record.extra, POLLS: polls + 1})
        if ending:
            extra[ENDING_NAMESPACES] = sorted(ending)
            extra[ENDING_SINCE] = {ns: at.isoformat() for ns, at in ending_since.items() if at is not None}
        if outlasting or ORPHANS_UNSHORTENED in extra:
            extra = _noted_unshortened(extra, outlasting, shortened, now, overdue_until or {})
        if deleting and given:
            # (a deletion this pass gave has that grace from now on, or a shorter one someone else gives later: the
            # next poll that lists it so keeps this moment, or notes its own)
            noted = extra.get(ORPHANS_DELETING)
            seen = dict(noted) if isinstance(noted, dict) else {}
            extra[ORPHANS_DELETING] = {
                **seen,
                **{uid: [grace, now.isoformat()] for uid, grace in given.items()},
            }
        # (the next look no later than the deadline, where the timeout policy acts: see _until_deadline)
        wait = _until_deadline(max(_poll_delay(polls, policy.poll_seconds), asked_wait), deadline, now)
        return Outcome.wait(
            wait,
            pods_evicted=record.pods_evicted + evicted,
            extra=extra,
            **changes,
        )

    def _shorten(self, pod: PodInfo, grace: int) -> bool:
        """Shorten to ``grace`` the deletion of ``pod``, of a namespace being deleted, which its namespace
        controller deleted with the pod's own grace (possibly far past the drain's cap): an eviction is refused
        there (403 NamespaceTerminating), a delete is not. It disrupts nothing an eviction would not: kube-apiserver
        evicts a pod already being deleted without looking at its budgets (canIgnorePDB, eviction.go), by this very
        delete. The API server only ever shortens a deletion in progress. A refusal (a webhook on pod deletes) leaves
        the pod to its own grace, within the drain's timeout policy, as before. Whether the delete was taken: not
        when refused, nor when the pod is gone (404, or 409: another pod of its name), which shortens nothing: podgc
        may have removed it from the API since the list, its live kubelet still stopping it with its own grace."""
        try:
            return self._cluster.delete_pod(pod, grace)
        except Refused as refusal:
            log.info("pod %s/%s, being deleted, is not hastened: %s", pod.namespace, pod.name, refusal)
            return False

    def _failing(
        self,
        record: LifecycleRecord,
        notes: PodNotes,
        calls: _PodCalls,
        unprocessed: list[tuple[PodInfo, str]],
        answered: set[str],
        asked: list[PodInfo],
        told: int,
        now: datetime,
    ) -> None:
        """Noted in ``notes``, since when each pod's evictions have got no answer of the pod's own at every try: they
        failed (``calls``' failures), or its PodDisruptionBudget is still being processed (``unprocessed``: 429
        with a Retry-After, which its disruption controller settles within seconds). A pod that got another answer,
        or is gone, is dropped. A pod stalled so for EVICTION_FAILING_FOR is told (an EvictionFailing or
        EvictionBlocked Warning, once per pod, kind and drain, within the pass's TOLD_PER_PASS) and counted as an eviction
        error, the alarm: what lasts is no blip but the API server refusing the pod's eviction in all but its status
        code (a webhook on evictions that cannot be reached, under failurePolicy Fail; a disruption controller that
        is down, whose budgets are never processed), which only an operator ends. A blip stays a retry, as before.
        """
        stalled = [
            *((pod, "EvictionFailing", "failed at every try", str(error)) for pod, error in calls.failures),
            *(
                (pod, "EvictionBlocked", "blocked, its PodDisruptionBudget never processed,", detail)
                for pod, detail in unprocessed
            ),
        ]
        settled = answered - {pod.uid for pod, _ in unprocessed}
        notes.stalled(pod.uid for pod in asked if pod.uid not in settled)
        for pod, reason, what, detail in stalled:
            since = notes.stalled_since(pod.uid, now)
            if now - since < EVICTION_FAILING_FOR:
                continue
            self._metrics.count("EvictionErrors")  # the alarm: an operator must look
            # (a failure is told even of a pod told blocked by its budget before: that Event, the only one on the
            # pod, would have the operator look at a PodDisruptionBudget while a webhook fails its evictions)
            kind = BLOCKED if reason == "EvictionBlocked" else FAILING
            if not notes.told(pod.uid, kind) and told < TOLD_PER_PASS:
                notes.tell(pod.uid, kind)
                told += 1
                why = f"{what} since {since:%H:%M:%S}Z: {detail}; asked again until the drain's timeout"
                self._tell(record, pod, reason, why)

    def _grace_cap(self, deadline: datetime, now: datetime) -> int:
        """A pod's grace never reaches past the drain's deadline (two minutes, for a Spot interruption), nor
        falls below what the timeout policy would give it anyway."""
        policy = self._policy
        return min(policy.pod_grace_cap, max(policy.force_grace, int((deadline - now).total_seconds())))

    def _renew_slot(
        self, record: LifecycleRecord, node: str, now: datetime
    ) -> tuple[SlotDecision, Outcome | None]:
        """The drain's slot renewed before any of a poll's evictions (its node's, or the pods left bound to its
        deleted node's name), and the wait instead of them when it is not held."""
        policy = self._policy
        # (near the global timeout, a paused drain takes its slot back as a waiter would: forced. Paused, it has
        # waited in line since its pause: a document created again since, which lost the line, puts it back in its
        # place among the other paused drains rather than as of this poll, as a first ask's slot_waiting_since does)
        request = replace(
            _slot_request(record, node, record.zone, in_progress=True, **_precedence(record, now, policy)),
            waiting_since=record.drain_paused_at,
        )
        renewed = self._slots.renew(request)
        _wake(self._dispatcher, renewed.wake)  # (as for a first ask: see AcquireSlot)
        if renewed.reason is SlotReason.RELEASED:
            # This lifecycle gave its slot back already: a late delivery of this step (a duplicate that read the
            # record before the commit that went on), whose commit loses. No slot was lost, no drain paused.
            log.info("node %s: a late delivery of a drain that gave its slot back", node)
            return renewed, Outcome.wait(policy.budget_retry_seconds)
        if not renewed.granted:
            # Our holder expired and its slot went to another node: evicting now could exceed the budget. The
            # node waits with precedence (it is disruption in progress), and the wait is not drain time.
            log.warning("lost the budget slot of node %s: pausing the drain until it is back", node)
            self._metrics.count("BudgetSlotsLost")
            paused = Outcome.wait(policy.budget_retry_seconds, drain_paused_at=record.drain_paused_at or now)
            return renewed, paused
        return renewed, None

    def _node_deleted(self, record: LifecycleRecord, now: datetime) -> Outcome:
        """The node object is gone, and its pods may not be: a node deleted while its instance runs (``kubectl
        delete node``) leaves them bound to its name, running, until the pod garbage collector force-deletes
        them (40 s later), all at once, whatever their PodDisruptionBudgets say, and only then are they
        replaced; completing the action now would terminate the instance under them. So they are evicted, as
        on the node, and waited for until each is gone or past its deletion's deadline (a live kubelet stops
        them within their grace; with none, they stay until the garbage collector ends them), or until the
        drain's deadline; then the drain settles. No node has the name meanwhile, so no other instance's pod is
        bound to it. Their evictions are the drain's disruption as those on the node are: its slot is renewed
        first, and while it is lost (or unrenewed, refused or failing, for a holder TTL) the drain pauses (invariant
        1), its pause not drain time."""
        node = _known(record.node, "node")
        deadline = self._deadline_now(record, now)
        try:
            pods = podfilter.remaining(self._cluster.pods_on(node))
        except TransientError as error:
            # (lists that fail come before the slot's renewal, as the node's read does on a node that is there: kept
            # from the slot as a failing renewal is, a holder TTL of them a wait for a slot, and past the deadline
            # the timeout policy, not the engine's retries until the global timeout: see _renewal_failing)
            raise _RenewalFailed(error) from error
        left = holding(pods, now)
        cap = self._grace_cap(deadline, now)
        # (a pod someone else deletes with a longer grace is asked again with the drain's, as on a node that is there:
        # the API server shortens a deletion in progress; left alone, it held the drain to its own grace, an hour's
        # deletion to the drain's deadline, once podgc removed it from the API)
        seen = _deleting_seen(record.extra, pods, now)
        overdue_until = _overdue_stopping(pods, seen, now)
        # (and so is one listed past its deadline whose kubelet may stop it later than the drain's grace would: its
        # deletion shortened by someone else to a grace still longer than the cap; counted as stopped within the cap,
        # as a pod ahead of its deadline asked again is, unless the pass does not shorten it: see _ask_to_leave)
        late = _overdue_outlasting(pods, overdue_until, cap, now)
        outlasting = podfilter.outlasting(left, cap, now) + late
        asked = podfilter.to_evict(pods) + outlasting
        noted = _stopping_until(
            record.extra,
            left,
            cap,
            now,
            shortened={pod.uid for pod in outlasting},
            overdue=[
                *(at for uid, at in overdue_until.items() if uid not in {pod.uid for pod in late}),
                *(now + timedelta(seconds=podfilter.grace_for(pod, cap)) for pod in late),
            ],
        )
        # (and those a pass did not shorten, at their own deadline, until a pass does: kept apart, see
        # ORPHANS_UNSHORTENED)
        stopping = max(
            [*([] if noted is None else [noted]), *_unshortened(record.extra).values()], default=None
        )
        if not left and (stopping is None or now >= min(stopping, deadline)):
            log.warning("node %s of %s is gone: nothing left to drain there", node, record.instance_id)
            return Outcome.goto(settle_step(record), outcome="node-gone")
        # The usual way a node object goes is its instance's termination (the cloud controller deletes it):
        # then no kubelet will stop these pods, an eviction asks nothing of a gone instance, and waiting for
        # their grace only holds the slot. EC2 says so at once (one call, only while pods are bound or stopping).
        down = _instance_down(self._instances, record)
        if down is not None:
            log.warning(
                "node %s of %s is gone, its instance %s: nothing left to drain there",
                node,
                record.instance_id,
                down,
            )
            return Outcome.goto(settle_step(record), outcome="instance-down")
        log.warning(
            "node %s of %s is gone, %d of its pods still bound to it: evicting them, waiting for them to stop",
            node,
            record.instance_id,
            len(pods),
        )
        try:
            _, paused = self._renew_slot(record, node, now)
        except TransientError as error:
            # (failing for a holder TTL, the slot may be another node's: these pods are evicted no more than the
            # node's would be, and the drain does not end at its own deadline beside that node's: invariants 1, 9)
            raise _RenewalFailed(error) from error
        if paused is not None:
            return paused
        # (the slot back after a pause: the drain goes on, its deadline moved by the pause, as in _poll)
        changes = (
            {} if record.drain_paused_at is None else {"drain_deadline": deadline, "drain_paused_at": None}
        )
        extra = {key: value for key, value in record.extra.items() if key != ORPHANS_DELETING}
        if noted is not None:
            extra[ORPHANS_STOPPING] = noted.isoformat()
        if seen:
            extra[ORPHANS_DELETING] = seen
        record = record.model_copy(update={"extra": extra})
        if not left and not late and stopping is not None:
            # Gone from the API within their grace: podgc force-deleted them once its quarantine was over, while
            # their kubelet, alive, still stops them (it kills a pod removed from the API with its grace): the
            # action is not completed under them until that grace is over, nor past the drain's deadline
            log.warning("the pods of node %s are gone, still stopping until %s: waiting", node, stopping)
            until = (min(stopping, deadline) - now).total_seconds()
            wait = max(1.0, min(until, float(self._policy.poll_seconds)))
            return Outcome.wait(wait, extra=record.extra, **changes)
        if now >= deadline and int(record.extra.get(POLLS, 0)) > 0:
            # Past its deadline, pods still held there (a PodDisruptionBudget refused their evictions): the timeout
            # policy acts, as on a node that is there (every drain asks its pods to leave once, before any force).
            # Settled as node-gone instead, the action was completed under them, the force never applied, the
            # timeout never counted: they ran on until the instance's end, or podgc's force-delete.
            return self._timed_out(record, now, left, **changes)
        return self._ask_to_leave(
            record,
            asked,
            cap,
            deadline,
            now,
            outlasting=outlasting,
            overdue_until=overdue_until,
            deleting=True,
            **changes,
        )

    def _tell(
        self, record: LifecycleRecord, pod: PodInfo, reason: str, why: str, *, what: str = "Eviction"
    ) -> None:
        """A warning event on the pod and on its node: why its eviction (or ``what``) did not happen."""
        message = f"{what} of {pod.namespace}/{pod.name} {why}"
        self._events.on_pod(pod, reason, message, warning=True)
        self._events.on_node(_known(record.node, "node"), record.node_uid, reason, message, warning=True)

    def _stuck(
        self,
        node: NodeInfo,
        left: list[PodInfo],
        now: datetime,
        *,
        past_deadline: bool,
        forced_at: datetime | None = None,
    ) -> tuple[list[PodInfo], str]:
        """The pods of ``left`` that will never leave by themselves, and why: all those being deleted when
        the node's kubelet is gone (Ready Unknown: they stay Terminating until the node object goes); those past
        their deletion's deadline (once forced, the force grace from the force at least) when it says its container
        runtime is down or hung (none stops meanwhile, but a runtime that answers again stops them with their grace;
        a kubelet that reports the node NotReady for another reason is there to stop them), else
        those still there well past their deletion's deadline. A pod force-deleted with a short grace makes
        the drain look at the node as soon as that grace is over, not only after ``CHECK_NODE_AFTER``.
        Past the drain's deadline (its timeout policy has acted), also those with no grace left
        (deletionGracePeriodSeconds 0) that only their finalizers keep: waited for until a minute past their
        deadline, they would hold the slot that long past the force grace (invariant 10). That field is no proof
        that nothing runs for them: the kubelet's final delete of a pod it stopped sets it, but so does any delete
        with grace 0 (the force's, for a pod whose own grace is 0; an operator's --force), at once, before any
        kubelet acts. Either way no grace is owed to them, so the instance's end takes nothing from them the delete
        did not, and the outcome says what is known. Before the deadline, their finalizers' controller is given
        that minute (a Job's tracking finalizer goes within seconds). Once forced (``forced_at``: the force policy
        deleted the pods), a pod is waited for only FORCED_STOP_SLACK past its deletion's deadline, not that minute,
        and never less than past the force grace from the force: a pod being deleted with a longer grace that the
        force deleted again has its deadline counted by the API server from the first request (possibly long past),
        while its kubelet stops it with the shorter grace from when it sees it (a shorter grace restarts its kill)."""
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

        def grace_over(deadline: datetime) -> datetime:
            # (once forced, never sooner than the force grace from the force: the API server counts a shortened
            # grace from the first delete, the kubelet from when it sees the force's)
            if forced_at is None or not past_deadline:
                return deadline
            return max(deadline, forced_at + timedelta(seconds=self._policy.force_grace))

        if node.runtime_down:
            # (its kubelet stops nothing while the runtime is down; one that answers again within their grace
            # stops them with it: they are left once the grace is over, what is owed to them, not at the first look)
            ungraced = [
                pod for pod in deleting if pod.deletion_at is not None and now > grace_over(pod.deletion_at)
            ]
            if ungraced:
                return ungraced, "node not ready, its container runtime down"

        def given_up(deadline: datetime) -> datetime:
            if forced_at is None or not past_deadline:
                return deadline + STUCK_AFTER
            return grace_over(deadline) + FORCED_STOP_SLACK

        past = [pod for pod in deleting if pod.deletion_at is not None and now > given_up(pod.deletion_at)]
        kept = [pod for pod in deleting if past_deadline and pod.deletion_grace == 0 and pod not in past]
        if not kept:
            return past, "past their deletion deadline"
        if not past:
            return kept, "deleted with no grace left, kept by finalizers"
        return (
            past + kept,
            "past their deletion deadline, or deleted with no grace left and kept by finalizers",
        )

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
            names = ", ".join(f"{p.namespace}/{p.name}" for p in left[:5])
            self._tell_timeout(
                record, f" with {len(left)} pods left ({names}{', ...' if len(left) > 5 else ''})"
            )
        if policy.on_timeout is TimeoutPolicy.CONTINUE:
            return self._drained(record, now, "drain-timeout-continued", **changes)
        forced_at = record.forced_at or now
        if now > self._force_ends(forced_at):
            log.error("%d pods did not stop after a forced delete: going on", len(left))
            return self._drained(record, now, "drain-timeout-forced-incomplete", **changes)
        # the pods not being deleted yet, and those someone else deletes with a longer grace than the force grace
        pods = [pod for pod in left if not pod.terminating]
        forced = pods + podfilter.outlasting(left, policy.force_grace, now)
        extra, retry_after = self._force(record, forced)
        # (a server that said when to come back is asked no sooner, up to where the force grace's slack ends)
        until = self._force_ends(forced_at) - now
        # (looked at again no later than when the last pod being deleted is given up (see _stuck: FORCED_STOP_SLACK
        # past its deadline, or the force grace from the force; those deleted now from now), whatever the poll
        # interval: a longer poll would hold the slot past it, a poll-long wait more for a pod whose delete the API
        # server stamped a moment after the drain's now; a Retry-After still holds)
        poll: float = policy.poll_seconds
        grace = timedelta(seconds=policy.force_grace)
        waited = [pod.deletion_at for pod in left if pod.deletion_at is not None and pod not in forced]
        deadlines = [forced_at + grace, *waited]
        given_up = max(deadlines + ([now + grace] if forced else [])) + FORCED_STOP_SLACK - now
        if given_up >= timedelta(0):
            poll = min(poll, given_up.total_seconds() + 1)
        # (and no later than just past where the force stops waiting: a poll of the force grace and 11 s looked
        # up to as long past it, the drain's end past its tail, where the guard had completed the action)
        poll = max(1.0, min(poll, until.total_seconds() + 1))
        wait = max(poll, retry_after_wait(retry_after, until))
        return Outcome.wait(wait, forced_at=forced_at, extra=extra, **changes)

    def _timed_out_unlisted(
        self, record: LifecycleRecord, now: datetime, error: TransientError, **changes: Any
    ) -> Outcome:
        """The drain's timeout is over and its pods cannot be listed, or its node read (an API server whose lists
        time out or fail, or all its reads: an overloaded etcd, lists shed by their priority level), or its slot
        renewed (the budget ConfigMap's reads or writes failing: nothing is disrupted without it). Retried as
        any transient failure, each retry renewing the slot (or, when the node cannot be read, no retry renewing
        it: counted until it expires), it would hold its action until the global timeout, and that slot until
        then or its expiry: the timeout policy acts on what can be known instead. Continue ends the drain now; force waits its grace and slack
        for a list that would let it delete the pods, as it waits for pods it deleted, then ends it too."""
        policy = self._policy
        forced_at = record.forced_at or now
        if record.forced_at is None:
            log.warning("drain timeout on node %s, whose node or pods cannot be read: %s", record.node, error)
            self._tell_timeout(record, f"; its node or its pods could not be read ({error})")
        if policy.on_timeout is TimeoutPolicy.CONTINUE or now > self._force_ends(forced_at):
            log.error("the pods of node %s cannot be listed past the drain's timeout: going on", record.node)
            return self._drained(record, now, "drain-timeout-unlisted", **changes)
        # (looked at again no later than just past where the force stops waiting, whatever the poll interval: a
        # 300 s poll held the slot that long past the force grace and its slack)
        ends = (self._force_ends(forced_at) - now).total_seconds() + 1
        wait = max(1.0, min(float(policy.poll_seconds), ends))
        return Outcome.wait(wait, forced_at=forced_at, **changes)

    def _tell_timeout(self, record: LifecycleRecord, what: str) -> None:
        """The drain's timeout, counted and told on the node once (when the timeout policy first acts)."""
        self._metrics.count("DrainTimeouts")
        self._events.on_node(
            _known(record.node, "node"),
            record.node_uid,
            "DrainTimeout",
            f"Drain timed out{what}: timeout policy {self._policy.on_timeout}",
            warning=True,
        )

    def _force_ends(self, forced_at: datetime) -> datetime:
        """Where the force policy stops waiting: the force grace and its slack after the force began."""
        return forced_at + timedelta(seconds=self._policy.force_grace) + FORCED_POD_SLACK

    def _force(self, record: LifecycleRecord, pods: list[PodInfo]) -> tuple[dict[str, Any], float | None]:
        """Delete the pods (the force policy); the record's extra after it, and the Retry-After a failed delete
        asked for, if one did. A delete the API server refuses is that pod's answer: the others are deleted, it
        is asked again at every poll until the force grace and its slack are over, and the eviction errors'
        alarm calls an operator."""
        notes = PodNotes(record.extra)
        calls = _PodCalls(notes, self._metrics, self._time_left)
        told = 0
        for pod, refusal in calls.answers(pods, self._delete):
            if refusal is None:
                continue
            log.error("forced delete of pod %s/%s refused: %s", pod.namespace, pod.name, refusal)
            self._metrics.count("EvictionErrors")
            if not notes.told(pod.uid, DELETION) and told < TOLD_PER_PASS:
                notes.tell(pod.uid, DELETION)
                told += 1
                self._tell(
                    record, pod, "DeletionRefused", f"refused by the API server: {refusal}", what="Deletion"
                )
        return notes.into(record.extra), calls.retry_after

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
