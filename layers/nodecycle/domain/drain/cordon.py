"""The drain's cordon: the owner and in-progress annotations and the cordon in one PATCH."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from nodecycle.domain.budget import Lifecycles, SlotReason
from nodecycle.domain.budget.errors import WriteOutcomeUnknown
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.common import (
    ADOPT_FROM,
    _cause,
    _deadline_cap,
    _ended,
    _for_this_action,
    _known,
    _named,
    _node_as_seen,
    _precedence,
    _refused_while_time_runs,
    _set_on_node,
    _slot_request,
    _the_instances,
    _unseen,
    _waiters_backoff,
    _wake,
)
from nodecycle.domain.drain.orphans import NOTHING_CORDONED, deleted_node
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError, retry_after_wait
from nodecycle.domain.flow import settle_step
from nodecycle.domain.model import (
    KEPT_ON_NODE,
    SET_ON_NODE,
    LifecycleRecord,
    Step,
    Transition,
)
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import DrainPolicy
from nodecycle.domain.ports.budget import Slots
from nodecycle.domain.ports.cluster import Claim, Cluster, Events, NodeInfo, Refused
from nodecycle.domain.ports.runtime import Clock, Metrics

log = logging.getLogger(__name__)

# record.extra key: since when the API server refuses the drain's cordon (a webhook that guards the node, RBAC)
CORDON_REFUSED = "cordon_refused"
# record.extra key: since when each claim of the node fails: it conflicts (409: the node changed between its read and
# the PATCH, which names the version read), or fails as the API server's failure (a webhook that is down, 5xx, 429)
CORDON_FAILING = "cordon_failing"
# record.extra key: since when the cordon's tries are refused or fail before they renew the drain's budget slot (its
# renewal, or the node's read before it), the first in a row (or the last whose write may have landed). Its holder,
# last renewed before then, has expired a holder TTL later at the latest, and its slot may be another node's: from
# then on the cordon waits for a slot as any waiter does (see _unrenewed). Dropped by any try that renewed the slot.
CORDON_UNRENEWED = "cordon_slot_unrenewed_since"


class ClaimedLifecycles(Lifecycles, Protocol):
    """What the lifecycles' records tell: a slot given back (see :class:`Lifecycles`), and whether the lifecycle a
    node's claim names is over (see ``RecordedLifecycles``)."""

    def over(self, record_id: str, token: object) -> bool: ...


@dataclass(frozen=True)
class Failure:
    """Why a claim of the node failed, and the Retry-After the API server asked for, if it did."""

    why: str
    retry_after: float | None = None


def _its_own_claim(node: NodeInfo, record: LifecycleRecord) -> bool:
    """Whether the claim on ``node`` is this very lifecycle's: its record id and its token. A lifecycle without a hook
    (a maintenance, a Spot interruption) shares its record id with the lifecycles of the instance before it on the
    record (model.record_id names no token for them), and the claim one of them left (its release given up, the
    sweeper keeping off a record open again) is not a cordon of this one's that landed unrecorded."""
    return node.lifecycle == record.id and record.goes_by(node.progress().get("token"))


def _cordoned_at(node: NodeInfo, record: LifecycleRecord, now: datetime) -> datetime:
    """When this lifecycle's own claim cordoned ``node``, if one did that the record does not tell of (its
    answer lost with the connection, its invocation ended after the PATCH; the step retried): the start its
    in-progress annotation carries (the clock as that PATCH was sent, the cordon landing moments later). Else
    ``now``. The slot has been held for the drain since that cordon, and
    its bound (invariant 10) runs from it, not from the retry."""
    if not _its_own_claim(node, record) or not node.unschedulable:
        return now
    try:
        started = datetime.fromisoformat(str(node.progress().get("started")))
    except ValueError:
        return now
    return min(started, now) if started.tzinfo is not None else now


def _without_refusal(found: dict[str, Any], record: LifecycleRecord) -> dict[str, Any]:
    """The record's extra (as the step found it so far) without the notes of a refused or failing cordon, or of one
    spared by the node's deletion: the cordon took effect, or the drain's time starts again with its next slot."""
    notes = (CORDON_REFUSED, CORDON_FAILING, CORDON_UNRENEWED, NOTHING_CORDONED)
    return {key: value for key, value in found.get("extra", record.extra).items() if key not in notes}


def _what_then(record: LifecycleRecord, deadline: datetime, on_timeout: str) -> str:
    """What the drain does after its cordon, as its Cordoned event says it: a cordon without an eviction (a rebalance
    recommendation's ``cordon`` policy) evicts nothing, and its pods stay until the instance goes."""
    if Step.EVICT not in record.plan:
        return "no pod is evicted, no new pod is scheduled there"
    return f"evicting its pods until {deadline:%H:%M:%S}Z, then {on_timeout}"


def _node_still_the_instances(cluster: Cluster, record: LifecycleRecord) -> NodeInfo | None:
    """The record's node read again by its name (its metadata only, when it is the node the slot's ask read whole);
    None when it is gone, or when its name is another instance's node now (a recycled private IP): nothing there is
    this lifecycle's to cordon, evict or hold a slot for."""
    return _the_instances(_node_as_seen(cluster, record, _known(record.node, "node"))[0], record)


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
        clock: Clock,
        lifecycles: ClaimedLifecycles | None = None,
    ) -> None:
        """``lifecycles``: what the lifecycles' records say now, read before a node not yet claimed for this
        lifecycle is touched (None: not read). ``clock``: the engine's, read again as the cordon is sent and
        answered (the drain's time starts at its cordon, not at the step's start)."""
        self._clock = clock
        self._lifecycles = lifecycles
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
            try:
                node, extra = self._finder.find(record)
            except (TransientError, Refused) as error:
                # (no slot held, but retried by the engine every few seconds with no deadline: no drain timeout
                # runs before the cordon, and a rebalance recommendation's record is a horizon hours away)
                return self._unread(record, error, now)
            if node is None:
                return Outcome.goto(settle_step(record), outcome="node-not-found", extra=extra)
            found = {"node": node.name, "node_uid": node.uid, "zone": node.zone, "extra": extra}
        else:
            try:
                node = _node_still_the_instances(self._cluster, record)
                # (deleted while its instance runs, its pods still bound to its name: see _nothing_to_cordon)
                orphaned = (
                    node is None
                    and Step.EVICT in record.plan
                    and deleted_node(self._cluster, record, (record.node,), now) is not None
                )
            except (TransientError, Refused) as error:
                return self._unread(record, error, now)
            if orphaned:
                return self._nothing_to_cordon(record, now)
        if node is None:
            return Outcome.goto(settle_step(record), outcome="node-gone")
        if node.owner not in (None, record.owner, record.extra.get(ADOPT_FROM)):
            if _for_this_action(node, record) and Step.ACQUIRE_SLOT in record.plan:
                # Claimed for this very action by another stack (a group both manage, by mistake), which took the
                # slot this lifecycle let expire: settling would complete the action under that drain. Back to
                # the slot's ask, which waits for it as for any drain of the action by another stack.
                log.error(
                    "owner %s drains node %s for this very lifecycle action: waiting", node.owner, node.name
                )
                return Outcome.goto(Step.ACQUIRE_SLOT, self._policy.budget_retry_seconds)
            log.warning("node %s was claimed by owner %s meanwhile: leaving it alone", node.name, node.owner)
            return Outcome.goto(settle_step(record), outcome=f"node-owned-by:{node.owner}")
        if (
            Step.ACQUIRE_SLOT not in record.plan
            and node.owner == record.owner
            and node.lifecycle not in (None, record.id)
            and not self._claim_over(node)
        ):
            # A cordon without a drain (a rebalance recommendation's) finding the node claimed by another lifecycle
            # of this stack (the drain of the instance's Spot interruption, which EC2 may tell with the
            # recommendation, or of its terminate hook; this cordon retried late): that drain cordons it, which is
            # all this one asks. Claimed again, the drain's claim was taken over, and this lifecycle's cleanup,
            # which follows at once, cleared the node's annotations under the drain.
            other = node.progress().get("transition") or "another lifecycle"
            if not node.unschedulable:
                # (uncordoned under a drain that goes on: kubectl uncordon, which the drain's next poll undoes by
                # cordoning it again. Not claimed over, see above; but not settled as cordoned by that drain
                # either while nothing cordons it: asked again until that drain cordons it, or is over)
                log.info("node %s is claimed by %s but not cordoned: waiting", node.name, node.lifecycle)
                return Outcome.wait(self._policy.budget_retry_seconds, **found)
            if other == Transition.SCHEDULED_CHANGE.short:
                # (but a maintenance's drain gives the node back uncordoned once the maintenance is over and the
                # instance stayed, as a reboot leaves it: left to it, the node took pods again, the instance still
                # at risk, and nothing of this lifecycle left to cordon it. It waits for that drain to let go of
                # the node, which it does at its cleanup, and then cordons it as its own)
                log.info("node %s is drained for a maintenance by %s: waiting", node.name, node.lifecycle)
                return Outcome.wait(self._policy.budget_retry_seconds, **found)
            log.info(
                "node %s is claimed by %s: nothing to cordon for %s", node.name, node.lifecycle, record.id
            )
            return Outcome.goto(settle_step(record), outcome=f"cordoned-by:{other}", **found)
        if (
            self._lifecycles is not None
            and node.lifecycle != record.id
            and self._lifecycles.gave_back(_slot_request(record, node.name, node.zone))
        ):
            # A late delivery (a duplicate that read the record at its cordon, run after the whole drain): its
            # record is over or at its cleanup, which cleared the node's annotations (or is clearing them). A
            # claim now would mark and cordon the node again for a lifecycle over, left to the sweeper, and its
            # slot's renewal could take a slot nothing gives back. Its commit loses; the node is left alone.
            log.info(
                "node %s: a late cordon of lifecycle %s, which is over: leaving the node alone",
                node.name,
                record.id,
            )
            return Outcome.wait(self._policy.budget_retry_seconds)
        if node.owner is None and node.in_progress:
            log.info("adopting node %s: in progress with no owner", node.name)
        set_on_node = self._set_on_node(node, record)
        started, deadline = self._drain_time(record, node, now)
        if record.drain_paused_at is not None:
            # Paused for a lost slot (here, or at the eviction's poll that sent it here): not drain time, up to where
            # the timeout policy must still act before the global timeout, as the eviction's poll counts it
            deadline = min(deadline + (now - record.drain_paused_at), _deadline_cap(record, self._policy))
        if Step.ACQUIRE_SLOT in record.plan:
            # The slot is confirmed in the document as it is now before the node is touched (invariants 1, 8):
            # the ConfigMap deleted and created again since the grant is seeded from the nodes nodecycle claimed,
            # which this one is not yet, so another node may hold the slot there. A holder granted moments ago
            # passes with one read (a fresh holder writes nothing); one not held takes it again if there is room,
            # else waits in line, not cordoned. Asked again after a refusal, polls apart, this renews the slot
            # as a drain's polls renew it. (Between this read and the PATCH a re-creation and another node's
            # grant would still fit, milliseconds: the first poll renews the slot before any eviction.)
            # A drain in progress cordoning its node again (uncordoned under it, or registered again: see Evict._poll)
            # asks as the eviction's polls ask: in progress, from its place in line since its pause if it is paused.
            # Asked as a first cordon, a slot lost here put it in line behind every node not yet touched that asked
            # first, and its wait counted against its timeout (invariant 9: see below). So does a first cordon that
            # landed though its step's commit was lost (its claim on the node, with which the cordon came, the record
            # telling no drain start): its node is disrupted already; asked as untouched, it waited in line behind
            # every untouched node, cordoned, and once granted was dated from that cordon (_cordoned_at): the wait
            # counted as drain time. (Its own claim: not one an earlier lifecycle on the record left, see _its_own_claim)
            again = record.drain_started_at is not None or _its_own_claim(node, record)
            request = _slot_request(
                record, node.name, node.zone, in_progress=again, **_precedence(record, now, self._policy)
            )
            if again:
                request = replace(request, waiting_since=record.drain_paused_at)
            try:
                renewed = self._slots.renew(request)
            except Refused as refusal:
                # (RBAC on the budget ConfigMap): not cordoned without its slot confirmed, and settled at the
                # drain timeout as the refused cordon it still is, rather than failed at every poll
                why = f"its budget slot may not be renewed: {refusal}"
                found, lost = self._unrenewed(record, found, now, refusal)
                deadline = deadline if lost is None else _deadline_cap(record, self._policy)
                return self._refused(
                    record, node.name, node.uid, why, started, deadline, now, found, waiting=lost is not None
                )
            except TransientError as error:
                # (the budget ConfigMap's reads or writes fail: 5xx, throttling, conflicts past the store's retries)
                # Not cordoned either: a failing claim, as the node's own PATCH failing is. Raised, it was retried
                # every few seconds with no deadline (no drain time runs before the cordon), nobody told.
                failed = Failure(f"its budget slot cannot be renewed: {error}", error.retry_after)
                found, lost = self._unrenewed(record, found, now, error)
                deadline = deadline if lost is None else _deadline_cap(record, self._policy)
                return self._failing(
                    record,
                    node.name,
                    node.uid,
                    failed,
                    started,
                    deadline,
                    now,
                    found,
                    waiting=lost is not None,
                )
            found, started, deadline = self._renewed(record, found, started, deadline, now)
            _wake(self._dispatcher, renewed.wake)
            if renewed.reason is SlotReason.RELEASED:
                # (this lifecycle gave its slot back already: a late delivery, whose commit loses; nothing lost)
                return Outcome.wait(self._policy.budget_retry_seconds, **found)
            if not renewed.granted and again:
                # Paused where it is, as the eviction's poll pauses a drain that lost its slot: its wait is not drain
                # time. Sent back to the slot's ask instead, it kept its start and deadline, and once it had a slot
                # again the time it waited was gone from its timeout (its pods forced at once, past it).
                if record.drain_paused_at is None:
                    log.warning(
                        "lost the budget slot of node %s while cordoning it again: pausing the drain",
                        node.name,
                    )
                    self._metrics.count("BudgetSlotsLost")
                return Outcome.wait(
                    self._policy.budget_retry_seconds, drain_paused_at=record.drain_paused_at or now, **found
                )
            if not renewed.granted:
                log.warning("lost the budget slot of node %s before its cordon: waiting for one", node.name)
                self._metrics.count("BudgetSlotsLost")
                # Its drain's time starts again with its next slot: time spent waiting for one never counts
                # against a drain's timeout (the refusal is told again if the next cordon is refused too)
                found["extra"] = _without_refusal(found, record)
                return Outcome.goto(Step.ACQUIRE_SLOT, self._policy.budget_retry_seconds, **found)
        # A drain whose time starts with this try (``now`` itself: no earlier try of the cordon, no claim of this
        # lifecycle found on the node, or a slot granted again) is dated from its cordon, not from the step's start:
        # the node's read and the slot's confirmation before the PATCH (a slow API server, a budget ConfigMap whose
        # writers conflict: up to seconds) are the slot's time, not the drain's (invariant 9), and the pods are
        # promised DrainTimeoutSeconds after the cordon before the timeout policy deletes them. The in-progress
        # annotation carries the clock as the PATCH is sent (the latest this step knows before it: what a retry
        # after a crash reads, see _cordoned_at); the drain's start and deadline, the clock once it is answered
        # (the cordon landed before that answer, or the refusal or failure came then: never before it).
        fresh = started == now
        if fresh:
            started, deadline = self._dated(record, self._after(now))
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
            answered = self._after(now)
            started, deadline = self._dated(record, answered) if fresh else (started, deadline)
            return self._refused(
                record, node.name, node.uid, str(refusal), started, deadline, answered, found
            )
        except TransientError as error:
            # (a claim whose answer was lost may have taken effect: the next try finds it, see _cordoned_at; its
            # first failure is noted as of its answer, after the PATCH landed if it did)
            log.warning("cordon of node %s failed: %s", node.name, error)
            answered = self._after(now)
            started, deadline = self._dated(record, answered) if fresh else (started, deadline)
            failed = Failure(str(error), error.retry_after)
            return self._failing(record, node.name, node.uid, failed, started, deadline, answered, found)
        answered = self._after(now)
        if fresh:
            started, deadline = self._dated(record, answered)
        if claim is Claim.CONFLICT:
            conflict = Failure("the node changed between its read and the PATCH (HTTP 409 Conflict)")
            return self._failing(record, node.name, node.uid, conflict, started, deadline, answered, found)
        if claim is Claim.GONE:
            # (deleted between the read and the claim: its pods, still bound to its name, as at the read above)
            try:
                orphaned = (
                    record.node == node.name
                    and Step.EVICT in record.plan
                    and deleted_node(self._cluster, record, (node.name,), now) is not None
                )
            except (TransientError, Refused) as error:
                return self._unread(record, error, now)
            if orphaned:
                return self._nothing_to_cordon(record, now)
            return Outcome.goto(settle_step(record), outcome="node-gone")
        log.info("cordoned node %s", node.name)
        # (the node as the slot's ask read it is not the node any more: the eviction's first poll reads it whole)
        claimed = _unseen(_without_refusal(found, record))
        found["extra"] = {**claimed, SET_ON_NODE: set_on_node}
        found["node_uid"] = node.uid
        self._events.on_node(
            node.name,
            node.uid,
            "Cordoned",
            f"Cordoned by nodecycle ({record.owner}) for {_cause(record)}: "
            f"{_what_then(record, deadline, self._policy.on_timeout)}",
        )
        # (a pause over: its time is in the deadline)
        paused: dict[str, Any] = {} if record.drain_paused_at is None else {"drain_paused_at": None}
        return Outcome.next(drain_started_at=started, drain_deadline=deadline, **paused, **found)

    def _nothing_to_cordon(self, record: LifecycleRecord, now: datetime) -> Outcome:
        """The node object deleted (kubectl delete node) after the slot's grant, or under a drain cordoning it again,
        its instance running and pods still bound to its name (see drain/orphans.py): nothing is left to cordon or
        annotate, and no pod is scheduled to a name no node has. Settled here, the action was completed under those
        pods, which the pod garbage collector force-deletes later, PodDisruptionBudgets or not. The eviction's poll
        asks them to leave instead, its slot renewed first (see ``Evict._node_deleted``); the drain's time starts
        as a cordon's would (a pause is moved by that poll). Noted NOTHING_CORDONED: a node its kubelet registers
        again under the name is claimed then, as the drain's node registered again is. (Dated from the clock now, not
        the step's start, as a cordon's answer dates a drain: the reads before took part of the step.)"""
        started, deadline = self._drain_time(record, None, self._after(now))
        log.warning(
            "node %s of %s was deleted, pods still bound to its name: nothing to cordon, evicting them",
            record.node,
            record.instance_id,
        )
        extra = {**_unseen(_without_refusal({}, record)), NOTHING_CORDONED: now.isoformat()}
        return Outcome.next(drain_started_at=started, drain_deadline=deadline, extra=extra)

    def _after(self, now: datetime) -> datetime:
        """The clock now, read after ``now`` (the step's start, on the same clock): never before it."""
        return max(now, self._clock.now())

    def _dated(self, record: LifecycleRecord, started: datetime) -> tuple[datetime, datetime]:
        """A drain's start and deadline when its time starts at ``started``."""
        return started, min(started + self._policy.timeout, _deadline_cap(record, self._policy))

    def _unrenewed(
        self, record: LifecycleRecord, found: dict[str, Any], now: datetime, error: TransientError | Refused
    ) -> tuple[dict[str, Any], datetime | None]:
        """``found`` noting since when the cordon's tries are refused or fail before they renew the drain's slot
        (CORDON_UNRENEWED), and when its holder expired for certain, a holder TTL later (None: not yet). From then
        on nothing of the node touched is the drain's (no cordon took effect), and its slot may be another node's:
        it waits for a slot as any waiter does, not counted as drain time (invariant 9), up to the latest its
        timeout policy may act before the action's global timeout (its deadline's cap), at the waiters' cadence.
        Counted as drain time instead, its timeout settled the action (``drain-timeout-cordon-refused``) beside
        the node granted its expired slot: an instance terminated undrained over the budget (invariant 1). A write
        whose answer was lost (WriteOutcomeUnknown) may have renewed the holder: the TTL runs from it."""
        extra = found.get("extra", record.extra)
        noted = extra.get(CORDON_UNRENEWED)
        if noted is None or isinstance(error, WriteOutcomeUnknown):
            since = now
        else:
            since = datetime.fromisoformat(str(noted))
        expired: datetime | None = since + self._policy.holder_ttl
        if expired is not None and now < expired:
            expired = None
        else:
            log.warning(
                "the budget slot of node %s expired unrenewed at %s: waiting for a slot", record.node, expired
            )
        return {**found, "extra": {**extra, CORDON_UNRENEWED: since.isoformat()}}, expired

    def _renewed(
        self,
        record: LifecycleRecord,
        found: dict[str, Any],
        started: datetime,
        deadline: datetime,
        now: datetime,
    ) -> tuple[dict[str, Any], datetime, datetime]:
        """``found``, the drain's start and deadline after its slot was renewed (held again): the note of the
        tries not renewed dropped. Lost meanwhile (see :meth:`_unrenewed`) and granted again now, the drain's time
        starts now, as with any slot it waited for: the time without it was a wait."""
        extra = found.get("extra", record.extra)
        noted = extra.get(CORDON_UNRENEWED)
        if noted is None:
            return found, started, deadline
        if now - datetime.fromisoformat(str(noted)) < self._policy.holder_ttl:
            kept = {key: value for key, value in extra.items() if key != CORDON_UNRENEWED}
            return {**found, "extra": kept}, started, deadline
        again = {**found, "extra": _without_refusal(found, record)}
        return again, now, min(now + self._policy.timeout, _deadline_cap(record, self._policy))

    def _claim_over(self, node: NodeInfo) -> bool:
        """Whether the claim of ``node`` by another lifecycle of this stack is stale, as its record tells: that
        lifecycle is over (a maintenance's drain whose release was refused or failed, its annotations left to the
        sweeper), and nothing of it will cordon the node, nor let go of it. Left to it, a cordon without a drain
        settled as cordoned by it, or, for a maintenance's, waited for a release that never comes until its own
        horizon, hours of reads. Its node's cordon does not tell: a drain that goes on cordons it again at its next
        poll, and a stale claim may have left it cordoned or not. (No records to read: not stale.)"""
        if self._lifecycles is None or node.lifecycle is None:
            return False
        return self._lifecycles.over(node.lifecycle, node.progress().get("token"))

    def _drain_time(
        self, record: LifecycleRecord, node: NodeInfo | None, now: datetime
    ) -> tuple[datetime, datetime]:
        """When the drain's time started and its deadline. ``node``: as read (None: unread)."""
        if record.drain_started_at is not None and record.drain_deadline is not None:
            # claimed again by its drain (its node was registered again, see Evict): the drain keeps its time
            return record.drain_started_at, record.drain_deadline
        # (a cordon the API server refused before, or whose claims or reads failed: the drain's time runs since its
        # first try; one that took effect though the step failed: since then)
        first_try = record.extra.get(CORDON_REFUSED) or record.extra.get(CORDON_FAILING)
        if first_try:
            started = datetime.fromisoformat(str(first_try))
        else:
            started = now if node is None else _cordoned_at(node, record, now)
        return started, min(started + self._policy.timeout, _deadline_cap(record, self._policy))

    def _unread(self, record: LifecycleRecord, error: TransientError | Refused, now: datetime) -> Outcome:
        """The API server fails the read of the node (an etcd that times out, 5xx, throttling): a failing claim of
        the node as any other (see ``_failing``); or refuses it (RBAC: a role without get on nodes): a refused
        cordon. Raised, a failure went to the engine's retries every few seconds with no deadline (the drain's
        time starts at its cordon): the slot held idle until its holder expired, the action held until its global
        timeout, and nobody told (a retry is a metric, no alarm); a refusal, after the engine's refused tries,
        into the dead-letter queue. The slot is not renewed meanwhile: nothing is disrupted, and an API server
        that comes back finds it still held, or takes it again, or waits in line for it."""
        log.warning("the node %s of the cordon cannot be read: %s", record.node, error)
        started, deadline = self._drain_time(record, None, now)
        # (a slot-less cordon's node is found here: not yet, while the reads that would find it fail)
        node, uid = _named(record), record.node_uid
        found: dict[str, Any] = {}
        waiting = False
        if Step.ACQUIRE_SLOT in record.plan:  # (read before the slot's renewal: not renewed either)
            found, lost = self._unrenewed(record, found, now, error)
            waiting = lost is not None
            deadline = _deadline_cap(record, self._policy) if waiting else deadline
        if isinstance(error, Refused):
            why = f"reading the node: {error}"
            return self._refused(record, node, uid, why, started, deadline, now, found, waiting=waiting)
        failure = Failure(str(error), error.retry_after)
        return self._failing(record, node, uid, failure, started, deadline, now, found, waiting=waiting)

    def _failing(
        self,
        record: LifecycleRecord,
        node: str,
        uid: str | None,
        failure: Failure,
        started: datetime,
        deadline: datetime,
        now: datetime,
        found: dict[str, Any],
        *,
        waiting: bool = False,
    ) -> Outcome:
        """The claim failed: the node changed between its read and the claim (409), or the API server failed it (a
        validating webhook on nodes that is down, a 5xx, throttling). Read again and decided again at once (no
        sooner than a Retry-After), as a concurrent writer's change or a blip asks. Failures that go on past a
        poll interval, retried every few seconds, would keep the drain outside its timeout, its slot not renewed,
        until the action's global timeout: a conflict storm (something rewrites the node at every turn), a
        webhook whose pods are gone. Such a failure is the API server refusing the cordon as any refusal does:
        told, the alarm, asked again at each poll with the slot renewed, and the action settled at the drain
        timeout (its time running since the first try, noted by CORDON_FAILING as by CORDON_REFUSED)."""
        extra = found.get("extra", record.extra)
        since = extra.get(CORDON_FAILING)
        wait = max(1.0, retry_after_wait(failure.retry_after))
        if since is None:
            return Outcome.wait(wait, **{**found, "extra": {**extra, CORDON_FAILING: now.isoformat()}})
        if now - datetime.fromisoformat(str(since)) < timedelta(seconds=self._policy.poll_seconds):
            return Outcome.wait(wait, **found)
        why = f"{failure.why}, at every try since {since}"
        return self._refused(
            record, node, uid, why, started, deadline, now, found, failure.retry_after, waiting=waiting
        )

    def _refused(
        self,
        record: LifecycleRecord,
        node: str,
        uid: str | None,
        why: str,
        started: datetime,
        deadline: datetime,
        now: datetime,
        found: dict[str, Any],
        retry_after: float | None = None,
        *,
        waiting: bool = False,
    ) -> Outcome:
        """The API server will not cordon the node (an admission webhook that guards it, a role without patch
        on nodes): told and asked again at each poll as any refusal of what a drain needs (see
        :func:`_refused_while_time_runs`; the slot renewed, see above). Nothing of the node is disrupted
        meanwhile: no eviction without its cordon, or the pods' replacements are scheduled onto it again. At the
        drain timeout the action is settled, as both timeout policies end (the instance goes, with its pods);
        the force policy's deletes are left out, for the same reason as the evictions. A cordon without a slot (a
        rebalance recommendation's) is asked again backing off instead, from a poll up to the waiters' cadence,
        jittered, as a waiter whose node is unread is: no budget bounds how many there are (a capacity pool's
        rebalance tells hundreds of Spot nodes at once), and each asking every poll, in step, adds to the load a
        failing API server fails under. (A drain with its slot keeps its cadence: the budget bounds them, and its
        slot is renewed at its polls.)"""
        log.error("cordon of node %s refused: %s", node, why)
        outcome = _refused_while_time_runs(
            record,
            node,
            uid,
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
                f"Cordon by nodecycle ({record.owner}) for {_cause(record)} refused by the API server: {why}; "
                f"asked again until {deadline:%H:%M:%S}Z, then the drain times out",
            ),
            timed_out=(
                f"Drain timed out with its cordon refused since {started:%H:%M:%S}Z ({why}): nothing was "
                f"evicted; {_ended(record)}"
            ),
            outcome="drain-timeout-cordon-refused",
            found=found,
        )
        # (``waiting``: its slot lost unrenewed, a waiter, asking at a waiter's cadence up to its deadline's cap)
        if (Step.ACQUIRE_SLOT in record.plan and not waiting) or not outcome.again:
            return outcome
        # (from a poll up, and never past the deadline, where the drain times out: a poll's floor taken again here
        # stepped past it, and the cordon was given up a poll late)
        wait = _waiters_backoff(self._policy, started, now, retry_after, deadline)
        return Outcome.wait(wait, **outcome.changes)

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
