"""The drain's first step: find the node of the instance, and take a budget slot for it or wait in line."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from nodecycle.domain.budget import SlotDecision, SlotReason, SlotRequest
from nodecycle.domain.budget.seed import DrainInProgress
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain import pods as podfilter
from nodecycle.domain.drain.common import (
    ADOPT_FROM,
    _cause,
    _deadline_cap,
    _ended,
    _for_this_action,
    _full_drain,
    _named,
    _node_as_seen,
    _of_instance,
    _precedence,
    _refused_while_time_runs,
    _seen,
    _slot_request,
    _then_undrained,
    _waiters_backoff,
    _wake,
)
from nodecycle.domain.drain.orphans import deleted_node
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import TransientError, retry_after_wait
from nodecycle.domain.flow import settle_step
from nodecycle.domain.model import (
    EARLIER_DRAIN,
    GLOBAL_TIMEOUT_CAP,
    KEPT_ON_NODE,
    MAINTENANCE_LISTED,
    WARM_POOL,
    LifecycleRecord,
    Step,
    Transition,
    parse_record_id,
    record_id,
)
from nodecycle.domain.nodes import NODE_NAME, PRIVATE_DNS, NodeFinder
from nodecycle.domain.policy import DrainPolicy, maintenance_look_in_line, maintenance_next_run
from nodecycle.domain.ports.budget import Slots
from nodecycle.domain.ports.cluster import (
    IN_PROGRESS_ANNOTATION,
    OWNER_ANNOTATION,
    Cluster,
    Events,
    NodeInfo,
    Refused,
)
from nodecycle.domain.ports.instances import ScheduledEvents
from nodecycle.domain.ports.lifecycle import RecordReads, RecordStore
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

FORCED_SLOT = "forced_slot"  # record.extra key: the slot was taken without room (global timeout near)
# The disruptions without a hook whose drain a later terminate hook of the same instance finds done
LINKED_CAUSES = (Transition.SPOT_INTERRUPTION, Transition.SCHEDULED_CHANGE, Transition.REBALANCE)
LINKED_POLL_SECONDS = 5
# record.extra key: the node's version ({"uid", "resource_version"}) as a terminate hook's ask read it before it read
# the disruptions' records and found no drain of theirs at all (one found, over or not, is looked at again at each ask:
# whether its node's pods can be listed, or are gone, moves nothing of the node). A drain for a disruption claims and
# cordons the node (one PATCH, which moves its resourceVersion) before its record says it began, and lets go of it
# (another) when it is over: a node still unclaimed at that version has no such drain since, and its records are not
# read again (three strongly consistent reads at each ask, every BudgetRetrySeconds, for the whole wait).
LINKED_NONE_AT = "linked_none_at"
# record.extra keys: since when the reads of the node fail at the slot's asks (the API server fails them: 5xx, an
# etcd that times out, throttling; or refuses them: RBAC), and since when that is told
ASK_UNREAD = "ask_unread"
ASK_UNREAD_TOLD = "ask_unread_told"
# record.extra keys: since when the API server fails the budget's ConfigMap at the slot's asks (5xx, throttling, a
# conflict storm: anything but a refusal, which the engine retries and dead-letters), and since when that is told
ASK_BUDGET_FAILING = "ask_budget_failing"
ASK_BUDGET_FAILING_TOLD = "ask_budget_failing_told"
_ASK_FAILURES = (ASK_UNREAD, ASK_UNREAD_TOLD, ASK_BUDGET_FAILING, ASK_BUDGET_FAILING_TOLD)
# record.extra key: the other stack whose claim of the node, left alone as its budget cannot tell it dead
# (CLAIMED_ELSEWHERE), was told of on the node, with the time the drain gives up that the event named ("OWNER until
# TIME"): told once for both (its asks retry every BudgetRetrySeconds), again when either changes (a maintenance
# moved, whose drain then gives up at another time: an Event is kept an hour only, the API server's --event-ttl)
CLAIM_LEFT_TOLD = "claim_left_told"
# record.extra key: since when this lifecycle waits for another owner's drain (or claim) of its node, out of the
# budget's line (no slot_waiting_since). A maintenance's drain looks at EC2's listing of it at such asks once per look
# interval, as a waiter in line does (see AcquireSlot._as_listed): at every ask, it called DescribeInstanceStatus
# every BudgetRetrySeconds for the whole of its drain timeout.
OWNER_WAITING_SINCE = "owner_waiting_since"
# The notes of a wait out of the budget's line (no slot_waiting_since), since whose first ask a maintenance's drain
# looks at EC2's listing of it once per look interval, as a waiter in line does (see AcquireSlot._as_listed)
_WAITS_OUTSIDE = (OWNER_WAITING_SINCE, *_ASK_FAILURES)
# How long after AWS Health told of an instance's maintenance EC2 may still not list it (DescribeInstanceStatus):
# intake takes in a maintenance EC2 does not list yet when Health's own event tells of it (EC2's list may lag it),
# and a drain due that soon after is not held back for EC2's listing. Past it, one EC2 never listed (a Health event
# type that is no scheduled event of the instance's) is not drained for (see AcquireSlot._as_listed).
MAINTENANCE_LISTED_WITHIN = timedelta(hours=1)
# A maintenance's first ask this much or more before its drain's due time is a look before it (see
# AcquireSlot._as_listed); nearer, the drain is due (a message runs up to a second before its due time)
EARLY_BY = timedelta(seconds=2)


# A claim of a node by another stack (its in-progress annotation's start) this old is no drain in progress: a hook's
# action lives at most GLOBAL_TIMEOUT_CAP (Auto Scaling's cap), and a maintenance's drain, which has no hook, at most
# its drain timeout (48 hours at most) plus its pauses for a lost slot, which end by the maintenance, at most its
# lead time (MaintenanceLeadMinutes: a week at most) after the drain began. Such a claim (its stack removed, or its
# sweeper not running) is adopted whatever the budget tells; a younger one only when the other stack writes in this
# budget and holds no slot nor place for the node there (see SlotRequest.claimed_by).
CLAIM_OUTLIVED = GLOBAL_TIMEOUT_CAP + timedelta(days=7)
# The budget's answers to a node another stack holds, waits for, or may be draining under a budget of its own
_OTHER_OWNERS = (
    SlotReason.HELD_BY_OTHER_OWNER,
    SlotReason.CLAIMED_BY_OTHER_OWNER,
    SlotReason.CLAIMED_ELSEWHERE,
)


def _claim_outlived(node: NodeInfo, now: datetime) -> bool:
    """Whether the claim of ``node`` (another stack's) began CLAIM_OUTLIVED ago or more, as its in-progress
    annotation tells; a claim that tells no start (unreadable) is taken for one that may be alive."""
    try:
        started = datetime.fromisoformat(str(node.progress().get("started")))
    except ValueError:
        return False
    if started.tzinfo is None:
        return False
    return now - started >= CLAIM_OUTLIVED


def _ordinal(number: int) -> str:
    suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    return f"{number}{suffix}"


# A waiter asks again at most this many times BudgetRetrySeconds apart, however far back in line it stands.
RETRY_IN_LINE_FACTOR = 4


def longest_wait_in_line(retry_seconds: float, holder_ttl: timedelta, poll_seconds: float = 0) -> float:
    """The longest a drain waits in line between two asks (:func:`_retry_in_line`'s bound; its other waits in
    line, a budget failing or another lifecycle's drain, are ``BudgetRetrySeconds`` or a poll): what the budget's
    renewal of a waiter's place must outlast (``DisruptionBudget``'s ``waiter_asks_within``)."""
    return max(_last_in_line(retry_seconds, holder_ttl), retry_seconds, poll_seconds)


def _last_in_line(retry_seconds: float, holder_ttl: timedelta) -> float:
    """How long the last waiter of a line waits between two asks (:func:`_retry_in_line`'s most rounds)."""
    return min(retry_seconds * RETRY_IN_LINE_FACTOR, holder_ttl.total_seconds() / 3)


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


def _retry_outside(request: SlotRequest, now: datetime, policy: DrainPolicy) -> float:
    """When a node kept out of a full line (QUEUE_FULL) asks again: as the last waiter inside it does (see
    :func:`_retry_in_line`), which it stands behind. Each ask reads the whole document (up to 900 KiB), and a node
    outside asked every ``BudgetRetrySeconds``, more often than any of the thousands inside: hundreds outside read
    tens of megabytes a second from the API server for nothing. Never later than the moment its action's global
    timeout lets it in past the line's bounds; from then on every ``BudgetRetrySeconds``, as before its forced slot: a
    node the line cannot take even then (full of drains in progress, or of urgent nodes) stays outside until it is
    forced, and a retry capped by that moment, past, asked every second (hundreds such in a long scale-in)."""
    base = policy.budget_retry_seconds
    delay = _last_in_line(base, policy.holder_ttl)
    if request.urgent_at is None:
        return max(1.0, delay)
    if now >= request.urgent_at:
        return float(base)
    return max(1.0, min(delay, (request.urgent_at - now).total_seconds()))


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
        records: RecordReads,
        maintenance: ScheduledEvents | None = None,
    ):
        """``maintenance``: EC2's scheduled events, which a scheduled maintenance's drain looks at before its first
        ask (see ``_as_listed``); None: not looked at (the steps' tests of the budget alone)."""
        self._maintenance = maintenance
        self._finder = finder
        self._cluster = cluster
        self._slots = slots
        self._dispatcher = dispatcher
        self._policy = policy
        self._metrics = metrics
        self._events = events
        self._records = records

    def _tell_claim_left(self, record: LifecycleRecord, node: NodeInfo) -> None:
        """Tell, on ``node``, that another stack's claim keeps this lifecycle from draining it (CLAIMED_ELSEWHERE).
        Only that stack's budget can tell its drain dead, and a removed stack's claim is taken for one only
        CLAIM_OUTLIVED after it began: until then its node's actions are completed undrained at their drain
        timeout (counted then, NodesClaimedElsewhere: the alarm). The operator who knows that stack is gone clears
        the claim, and the next ask adopts the node."""
        deadline = _gives_up_at(record, self._policy).isoformat()
        started = node.progress().get("started", "an unknown time")
        message = (
            f"Claimed by owner {node.owner} since {started}, a stack that writes nothing in this stack's budget "
            f"(a budget of its own, or a stack removed): left to its drain. nodecycle ({record.owner}) gives up "
            f"draining it for {_cause(record)} at {deadline}, the node undrained, unless the claim goes. If "
            f"{node.owner} is gone: kubectl annotate node {node.name} {OWNER_ANNOTATION}- {IN_PROGRESS_ANNOTATION}-"
        )
        log.warning("node %s: %s", node.name, message)
        self._events.on_node(node.name, node.uid, "NodeClaimedElsewhere", message, warning=True)

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        # (a hook's first ask, its node not looked for yet, reads the disruptions' records before it looks: a node
        # drained for one is not looked for again; later asks read them after the node, see LINKED_NONE_AT)
        linked_first = record.transition is Transition.TERMINATING and not record.node
        if linked_first:
            linked, _ = self._linked(record, now)
            if linked is not None:
                return linked
        if record.transition is Transition.SCHEDULED_CHANGE:
            listed = self._as_listed(record, now)
            if listed is not None:
                return listed
        extra = record.extra
        node_read = True  # (False: a node object deleted, its pods still bound to its name)
        try:
            # (a waiter's asks read the node's metadata only while it is the node an ask read whole: see NODE_SEEN)
            node, whole = _node_as_seen(self._cluster, record, record.node) if record.node else (None, True)
            if node is None or not _of_instance(node, record):
                # Not looked for yet, gone, or its name taken by another instance's node: look for the instance's
                node, extra = self._finder.find(record)
                whole = True
            if node is None:
                # Its node object deleted while the instance runs (kubectl delete node), its pods still bound to
                # its name, running: drained as its node's (see drain/orphans.py), not left to the instance's end
                names = (record.node, record.extra.get(NODE_NAME), extra.get(PRIVATE_DNS))
                node = deleted_node(self._cluster, record, names, now)
                whole, node_read = False, False  # (nothing read of a node: nothing to keep of it)
                if node is not None:
                    log.warning(
                        "the node of instance %s was deleted, pods still bound to its name %s: draining them",
                        record.instance_id,
                        node.name,
                    )
        except (TransientError, Refused) as error:
            if record.transition is Transition.TERMINATING and not linked_first:
                # (a drain for a disruption, over, is gone on from whether or not the node can be read now)
                linked, _ = self._linked(record, now)
                if linked is not None:
                    return linked
            return self._unread(record, error, now)
        linked_none_at: dict[str, str | None] | None = None
        if record.transition is Transition.TERMINATING and not linked_first:
            # (the node as read before the disruptions' records: a drain of theirs begun since would move it)
            read_at = _version(node) if node is not None and node_read and not _claimed(node) else None
            if read_at is None or whole or read_at != record.extra.get(LINKED_NONE_AT):
                linked, drain_found = self._linked(record, now)
                if linked is not None:
                    return linked
                if drain_found:
                    # A drain found and not gone on from (its node's pods could not be listed, or some are on it,
                    # or it is stuck) is decided again at the next ask: what decided it (a list that failed, pods
                    # that leave, the drain's end) moves nothing of the node, and its version vouches for nothing
                    read_at = None
            linked_none_at = read_at
        # (read: a failure after this one counts afresh; the budget's, once the budget answers)
        # (and the wait for another owner, kept by that wait's branch alone)
        extra = {key: value for key, value in extra.items() if key not in _WAITS_OUTSIDE}
        extra = {key: value for key, value in extra.items() if key != LINKED_NONE_AT}
        if linked_none_at is not None:
            extra[LINKED_NONE_AT] = linked_none_at
        if node is None:
            log.warning("no node for instance %s: nothing to drain", record.instance_id)
            self._metrics.count("NodesNotFound")
            return Outcome.goto(settle_step(record), outcome="node-not-found", extra=extra)
        if whole:  # (kept for the next read of it: the next ask, the cordon)
            extra = _seen(extra, node)
        found: dict[str, Any] = {"node": node.name, "node_uid": node.uid, "zone": node.zone, "extra": extra}
        if record.transition is Transition.SCHEDULED_CHANGE and self._terminated(record, node):
            return Outcome.goto(
                settle_step(record), outcome=f"drained-by:{Transition.TERMINATING.short}", **found
            )
        foreign = node.owner not in (None, record.owner)
        request = _slot_request(record, node.name, node.zone, **_precedence(record, now, self._policy))
        # (its place in line, which a ConfigMap created again lost: see SlotRequest.waiting_since; and the other
        # stack's claim of the node, which only a budget that stack writes in can tell dead: see claimed_by)
        claimed_by = node.owner if foreign and not _claim_outlived(node, now) else None
        request = replace(request, waiting_since=record.slot_waiting_since, claimed_by=claimed_by)
        try:
            decision = self._slots.acquire(request)
        except TransientError as error:
            return self._budget_failing(record, error, now, found)
        # (its write removed the expired entries, a dead drain's slot among them: whom that lets go, goes now)
        _wake(self._dispatcher, decision.wake)
        if (decision.unmarked or decision.held_unmarked) and self._gave_it_back(record):
            # A late delivery of this step (a duplicate that read the record before the commit that went on) of
            # a lifecycle that gave its slot back before the budget's ConfigMap was created again: the mark that
            # refuses it (RELEASED) went with the ConfigMap before, and its node no longer names it. Its record
            # does: the slot goes back at once, marked in this document, rather than idle until the sweeper. So
            # too for the slot such a delivery took when its give-back failed: another late delivery finds it held
            # (held_unmarked), and gives it back.
            log.info("node %s: a late delivery of a drain that gave its slot back: giving it back", node.name)
            return self._give_back_late(record, node.name, found)
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
                # The other stack annotated the node but holds no slot for it any more in this budget, which it
                # writes in too: its drain died or gave up (its holder expired). Or its claim is older than any
                # drain lives (CLAIM_OUTLIVED). Adopt the node, as one in progress with no owner.
                log.warning(
                    "adopting node %s from owner %s, which holds it in the budget no more",
                    node.name,
                    node.owner,
                )
                found["extra"] = {**found["extra"], ADOPT_FROM: node.owner}
            return Outcome.next(slot_waiting_since=None, **found)
        if foreign and decision.reason in _OTHER_OWNERS:
            # Another stack is draining this node: leave it alone, and settle our own action once it is
            # done with it, or when our drain timeout says we have waited long enough. Unless it drains for
            # this very action (a group both stacks manage, by mistake): completing it would let Auto Scaling
            # terminate the instance under that drain. Its end ends the action (a heartbeat finds it gone).
            shared = _for_this_action(node, record)
            if shared:
                log.error(
                    "owner %s drains node %s for this very lifecycle action: is group %s managed by both?",
                    node.owner,
                    node.name,
                    record.group,
                )
            elif now > _gives_up_at(record, self._policy):
                if decision.reason is SlotReason.CLAIMED_ELSEWHERE:
                    log.warning(
                        "node %s left undrained: owner %s's claim (a budget of its own, or a stack gone) kept it",
                        node.name,
                        node.owner,
                    )
                    # an action completed with its pods never evicted: a page (NodesClaimedElsewhereAlarm), as a
                    # drain timeout is; the event on the node is seen only by whoever looks at the node
                    self._metrics.count("NodesClaimedElsewhere")
                return Outcome.goto(settle_step(record), outcome=f"node-owned-by:{node.owner}", **found)
            elif decision.reason is SlotReason.CLAIMED_ELSEWHERE and extra.get(CLAIM_LEFT_TOLD) != (
                told := _claim_left_told(node, record, self._policy)
            ):
                found["extra"] = {**found["extra"], CLAIM_LEFT_TOLD: told}
                self._tell_claim_left(record, node)
            log.info("node %s is being drained by owner %s: waiting", node.name, node.owner)
            since = record.extra.get(OWNER_WAITING_SINCE) or now.isoformat()
            found["extra"] = {**found["extra"], OWNER_WAITING_SINCE: since}
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
        # (kept out of a full line, QUEUE_FULL, it waits all the same: told, and waiting since its first ask, the
        # place a budget that lets it in takes it back by, as after a re-creation of its ConfigMap)
        if record.slot_waiting_since is None:
            place = "" if decision.position is None else f"{_ordinal(decision.position)} in line, "
            self._events.on_node(
                node.name,
                node.uid,
                "WaitingForDisruptionBudget",
                f"Waiting for a disruption budget slot to drain for {_cause(record)} "
                f"({place}{decision.holders} nodes draining, {decision.waiting} waiting: {decision.reason})",
            )
        retry = (
            _retry_outside(request, now, self._policy)
            if decision.reason is SlotReason.QUEUE_FULL
            else _retry_in_line(decision, request, now, self._policy)
        )
        return Outcome.wait(
            retry,
            slot_waiting_since=record.slot_waiting_since or now,
            **found,
        )

    def _as_listed(self, record: LifecycleRecord, now: datetime) -> Outcome | None:
        """What EC2's listing of the instance's maintenance, read before the first ask of a maintenance's drain,
        makes of it; None: drained now, as ever. AWS Health's update of a maintenance called off is closed, and
        intake takes nothing from it, nor is any Health event known to tell of a customer's move of one
        (ModifyInstanceEventStartTime): the lifecycle taken in at Health's first notice, days or weeks before, still
        ran at its due time. Called off, it emptied the node and took a slot from the nodes that need one; moved
        later, the watch after the drain found nothing coming by the old start, lifted the cordon at once, and
        nothing drained the node for the new one; moved earlier, it ran after the maintenance had struck.

        - EC2 lists no maintenance of the instance: called off, or carried out (listed "[Canceled]" or
          "[Completed]", or no more: an instance-reboot the customer's own reboot carried out), or never EC2's (a
          Health event type that is no scheduled event of the instance's): not drained for
          (``maintenance-not-listed``). When EC2 listed it at intake (MAINTENANCE_LISTED); one it did not list then,
          once EC2 has had MAINTENANCE_LISTED_WITHIN to list it (its list may lag Health's notice: drained as Health
          tells it before then).
        - EC2 lists one starting before this one's start (moved earlier, or one before it): the lifecycle is timed by
          it, and drained a lead time before it (now, when that has passed).
        - EC2 lists one at this one's start: drained now, once that is a lead time away.
        - EC2 lists only later ones, the first of them the next lifecycle's on the record (SUCCESSOR) or later: this
          one was called off, and that one drains in its own time (``maintenance-not-listed``).
        - Otherwise it was moved later: the lifecycle waits for the lead time before the new start, timed by it (its
          next first ask looks again).

        Intake runs a lifecycle before its drain is due to look (see policy.MAINTENANCE_LOOK): until then, each look
        that finds nothing to do sooner waits for the next (no slot asked for). Not for a lifecycle that took over a
        cordon the one before it on the record kept (its cleanup lifts it): it waits for its due time unlooked, then
        drains; nor when EC2 does not answer: the drain is not held back for a look once due. Asked once per first
        ask (DescribeInstanceStatus), of a maintenance's drain only: no call of a terminate lifecycle's; a waiter's
        later asks look once per look interval in line (see ``_moved_in_line``), and so do those of one waiting out of
        the line: for another owner's drain of its node (OWNER_WAITING_SINCE), or while its asks fail, its node unread
        or its budget failing (ASK_UNREAD, ASK_BUDGET_FAILING: asked again from a poll up to BudgetRetrySeconds for as
        long as a Kubernetes API outage lasts)."""
        if self._maintenance is None:
            return None
        waiting_since = record.slot_waiting_since or _waiting_outside_since(record)
        if waiting_since is not None:
            return self._moved_in_line(record, waiting_since, now)
        early = record.global_deadline - self._policy.maintenance_lead - now > EARLY_BY
        if record.extra.get(KEPT_ON_NODE):
            return self._until_due(record, record.global_deadline, now) if early else None
        listed_then = bool(record.extra.get(MAINTENANCE_LISTED))
        if _unlisted_yet(record, now):
            return self._until_due(record, record.global_deadline, now) if early else None
        try:
            starts = [event.not_before for event in self._maintenance.scheduled_events(record.instance_id)]
        except TransientError as error:
            log.warning(
                "whether EC2 still lists the maintenance of %s cannot be told (%s): %s",
                record.instance_id,
                error,
                "looked at again" if early else "drained for it",
            )
            return self._until_due(record, record.global_deadline, now) if early else None
        listed = _listed_start(record, starts)
        if listed is None:
            log.warning(
                "EC2 lists no maintenance of %s by its start %s (%s; AWS Health told of it at %s): its node is not "
                "drained for it",
                record.instance_id,
                record.global_deadline,
                "listed at intake: called off"
                if listed_then
                else "never listed: no scheduled event of the instance's",
                record.started_at,
            )
            return Outcome.goto(settle_step(record), outcome="maintenance-not-listed")
        if listed < record.global_deadline:
            log.warning(
                "EC2 lists the maintenance of %s at %s, before %s (moved earlier): its node is drained from %s",
                record.instance_id,
                listed,
                record.global_deadline,
                max(now, listed - self._policy.maintenance_lead),
            )
            return self._until_due(record, listed, now)
        if listed == record.global_deadline:
            return self._until_due(record, listed, now) if early else None
        log.warning(
            "EC2 lists the maintenance of %s at %s, no more at %s (moved): its node is drained from %s",
            record.instance_id,
            listed,
            record.global_deadline,
            max(now, listed - self._policy.maintenance_lead),
        )
        return self._until_due(record, listed, now, extra={**record.extra, MAINTENANCE_LISTED: True})

    def _moved_in_line(self, record: LifecycleRecord, since: datetime, now: datetime) -> Outcome | None:
        """A maintenance's lifecycle waiting in the budget's line whose maintenance EC2 now lists elsewhere, or no
        more; None: it asks as it waits. No AWS Health event tells of a customer's move of the event
        (ModifyInstanceEventStartTime: to any start at least 60 minutes ahead, up to its deadline), and Health's update
        of one called off is closed, which intake takes nothing from. So it looks at EC2 again, once per look interval
        in line (see policy.MAINTENANCE_LOOKS_IN_LINE: a waiter asks every BudgetRetrySeconds), at the first ask past
        each interval since it joined the line (its last ask's commit before it):

        - listed earlier: asked under the old start, its precedence near the action's end (urgent, then forced past
          the budget) and its drain's cap came after the maintenance had struck. Its ask runs again at once under the
          new start, its place in line kept.
        - listed later, its drain still due (a move within the lead time): its place kept too, timed by the new start.
        - listed later, past its lead time: kept in line, it drained when its turn came, hours or days before the
          maintenance, a slot taken from the nodes that need one now, and the watch after its drain, finding nothing
          coming by the old start, lifted the cordon, leaving the node undrained for the new one. It leaves the line
          (its place given back, and a slot passed on to it meanwhile, which goes to the next waiter) and waits for
          the new start's lead time, looking at EC2 meanwhile, then joins the line again as any drain come due: a
          place kept would have held up the waiters behind it. A slot it was passed and gave back is marked given
          back for the budget's TTL (a late delivery's refusal): a drain due again sooner than that waits it out.
        - listed no more (called off, or carried out: "[Canceled]", "[Completed]"), or only the next lifecycle's on
          the record or later: its node is not drained for it (``maintenance-not-listed``), its cleanup gives its
          place in line back. Unless EC2 may not list it yet (``_unlisted_yet``): it asks as it waits.

        EC2 not answering, it asks as it waits: the drain is not held back for a look once due. ``since``: when it
        joined the line, or began to wait for another owner's drain of its node (OWNER_WAITING_SINCE: no place)."""
        maintenance = self._maintenance
        if maintenance is None:
            return None
        look = maintenance_look_in_line(self._policy.maintenance_lead)
        if (now - since) // look <= max(record.updated_at - since, timedelta()) // look:
            return None
        try:
            starts = [event.not_before for event in maintenance.scheduled_events(record.instance_id)]
        except TransientError as error:
            log.warning(
                "whether EC2 moved the maintenance of %s cannot be told (%s)", record.instance_id, error
            )
            return None
        listed = _listed_start(record, starts)
        if listed is None and _unlisted_yet(record, now):
            return None
        if listed is None:
            log.warning(
                "EC2 lists no maintenance of %s by its start %s (called off while it waits in line): it leaves the "
                "line, its node not drained for it",
                record.instance_id,
                record.global_deadline,
            )
            return Outcome.goto(settle_step(record), outcome="maintenance-not-listed")
        if listed == record.global_deadline:
            return None
        due = listed - self._policy.maintenance_lead
        if listed < record.global_deadline or due - now <= EARLY_BY:
            log.warning(
                "EC2 lists the maintenance of %s at %s, no more at %s (moved while it waits in line): timed by it, "
                "its place in line kept",
                record.instance_id,
                listed,
                record.global_deadline,
            )
            return self._until_due(record, listed, now)
        if record.slot_waiting_since is not None:  # (one waiting for another owner has no place to give back)
            self._leave_line(record)
        log.warning(
            "EC2 lists the maintenance of %s at %s, no more at %s (moved later while it waits in line): it leaves "
            "the line, its node drained from %s",
            record.instance_id,
            listed,
            record.global_deadline,
            due,
        )
        # (the wait's notes go with it: its next ask, at the new due time, is a first ask, its failures counted afresh)
        extra = {key: value for key, value in record.extra.items() if key not in _WAITS_OUTSIDE}
        return self._until_due(
            record, listed, now, slot_waiting_since=None, extra={**extra, MAINTENANCE_LISTED: True}
        )

    def _leave_line(self, record: LifecycleRecord) -> None:
        """The waiter's place in line given back (and a slot passed on to it), whom that lets go woken. The budget
        failing the write, the place is left to expire (a waiter's place not renewed within the holder TTL goes, a
        slot passed on to it and not renewed too): asked again, a look that found a move later would ask for a slot
        meanwhile. A refusal (403) is raised, as at the waiter's asks: no wait makes it pass."""
        node = record.node
        if node is None:  # (no ask made: no place)
            return
        try:
            woken = self._slots.release(node, record.id, record.token)
        except TransientError as error:
            log.warning(
                "the place in line of node %s cannot be given back (it expires unrenewed): %s", node, error
            )
            return
        _wake(self._dispatcher, woken)

    def _until_due(self, record: LifecycleRecord, starts: datetime, now: datetime, **changes: Any) -> Outcome:
        """A maintenance's lifecycle, timed by its start ``starts`` as EC2 lists it, waits for its drain's due time (a
        lead time before that start), looking at EC2 again meanwhile (see policy.MAINTENANCE_LOOK); a start moved
        earlier into the lead time runs its first ask again at once, under the new start."""
        wait = maintenance_next_run(starts, self._policy.maintenance_lead, now) - now
        if starts != record.global_deadline:
            changes = {**changes, "global_deadline": starts, "heartbeat_deadline": starts}
        return Outcome.wait(wait.total_seconds(), **changes)

    def _terminated(self, record: LifecycleRecord, node: NodeInfo) -> bool:
        """Whether the group terminates the instance of a maintenance's lifecycle: a terminate lifecycle of this owner
        and instance claims its node (drains it) or released it (drained it), its instance leaving for good (not for
        its warm pool, from which it comes back). That drain is the node's: the maintenance's own would drain it a
        second time, a slot taken from the nodes that need one (a terminating instance runs, and EC2 lists its
        maintenance, until its hook completes). The terminate's record is read only for a node so marked."""
        for named in {node.lifecycle, node.released_for} - {None, record.id}:
            try:
                instance_id, transition, _ = parse_record_id(str(named))
            except ValueError:
                continue
            if instance_id != record.instance_id or transition is not Transition.TERMINATING:
                continue
            terminate = self._records.get(str(named))
            if terminate is None or terminate.owner != record.owner or terminate.destination == WARM_POOL:
                continue
            log.info(
                "instance %s is terminated by its group (lifecycle %s drains node %s): not drained for its %s",
                record.instance_id,
                named,
                node.name,
                record.transition.short,
            )
            return True
        return False

    def _unread(self, record: LifecycleRecord, error: TransientError | Refused, now: datetime) -> Outcome:
        """The API server fails the read of the node (an etcd that times out, 5xx, throttling) or refuses it (RBAC:
        a role without get on nodes) at the slot's ask. Raised, a failure went to the engine's backoff, which for a
        step that is not yet a drain doubles up to 3 minutes a try: an API server back after a few minutes found the
        waiter asking again minutes later (its place in line, renewed at its asks, expiring meanwhile; its
        precedence near the action's global timeout told late; a slot passed on to it held idle), for as long as
        the failure lasted, and nobody told (a retry is a metric, no alarm); a refusal went into the dead-letter
        queue after the engine's refused tries. Asked again a poll later instead (no sooner than a Retry-After), not
        told for a poll interval (a blip); then told (a Warning event, the alarm's metric), asked again backing off
        up to the waiters' cadence (BudgetRetrySeconds), jittered (held for the action's time, hundreds of waiters
        would otherwise read a failing API server every poll, in step, for hours), and held while the action's
        time lasts (see :func:`_waiting_deadline`): settled as a drain that could not begin
        (``drain-timeout-reads-refused``), nothing of the node touched, only where the action's global timeout
        would end it anyway. No slot is asked for meanwhile: one granted could not be used, its node unread."""
        log.warning("the node of %s cannot be read at its slot's ask: %s", record.instance_id, error)
        noted = record.extra.get(ASK_UNREAD)
        since = now if noted is None else datetime.fromisoformat(str(noted))
        found = {"extra": {**record.extra, ASK_UNREAD: since.isoformat()}}
        retry_after = error.retry_after if isinstance(error, TransientError) else None
        poll = max(self._policy.poll_seconds, retry_after_wait(retry_after))
        if isinstance(error, TransientError) and now - since < timedelta(seconds=self._policy.poll_seconds):
            return Outcome.wait(poll, **found)
        deadline = _waiting_deadline(record, self._policy)
        node = _named(record)
        outcome = _refused_while_time_runs(
            record,
            node,
            record.node_uid,
            self._events,
            self._metrics,
            self._policy,
            what="the read of the node",
            marker=ASK_UNREAD_TOLD,
            since=since.isoformat(),
            deadline=deadline,
            now=now,
            told=(
                "NodeUnreadable",
                f"nodecycle ({record.owner}) cannot read node {node} to drain it for {_cause(record)} "
                f"({error}), failing since {since:%H:%M:%S}Z: asked again every "
                f"{self._policy.poll_seconds} to {self._policy.budget_retry_seconds} s until {deadline:%H:%M:%S}Z, "
                f"{_then_undrained(record)}",
            ),
            timed_out=(
                f"Drain timed out before it began: node {node} could not be read since {since:%H:%M:%S}Z "
                f"({error}); nothing was evicted; {_ended(record)}"
            ),
            outcome="drain-timeout-reads-refused",
            found=found,
        )
        return self._asked_again(outcome, since, now, retry_after, deadline)

    def _budget_failing(
        self, record: LifecycleRecord, error: TransientError, now: datetime, found: dict[str, Any]
    ) -> Outcome:
        """The API server fails the budget's ConfigMap at the slot's ask (an etcd that times out, 5xx, throttling, a
        conflict storm), its node read. Raised, the failure went to the engine's backoff (minutes a try for a step
        that is not yet a drain), as a failing read of the node did (see :meth:`_unread`): asked again a poll later,
        then backing off up to the waiters' cadence (BudgetRetrySeconds), jittered, so that hundreds of waiters
        do not ask a failing API server in step every poll; told after a poll interval (a Warning event, the
        alarm's metric); and held while the action's time lasts (see :func:`_waiting_deadline`), then settled,
        nothing of the node touched, as a drain that could not begin (``drain-timeout-reads-refused``). A refusal (403, a ConfigMap
        missing or unreadable) is still the engine's to retry and dead-letter: no wait makes it pass."""
        log.warning("the budget cannot be asked for a slot for node %s: %s", found["node"], error)
        noted = record.extra.get(ASK_BUDGET_FAILING)
        since = now if noted is None else datetime.fromisoformat(str(noted))
        told = {key: record.extra[key] for key in (ASK_BUDGET_FAILING_TOLD,) if key in record.extra}
        found = {**found, "extra": {**found["extra"], **told, ASK_BUDGET_FAILING: since.isoformat()}}
        if now - since < timedelta(seconds=self._policy.poll_seconds):
            return Outcome.wait(max(self._policy.poll_seconds, retry_after_wait(error.retry_after)), **found)
        deadline = _waiting_deadline(record, self._policy)
        node = found["node"]
        outcome = _refused_while_time_runs(
            record,
            node,
            found["node_uid"],
            self._events,
            self._metrics,
            self._policy,
            what="the budget",
            marker=ASK_BUDGET_FAILING_TOLD,
            since=since.isoformat(),
            deadline=deadline,
            now=now,
            told=(
                "DisruptionBudgetUnavailable",
                f"nodecycle ({record.owner}) cannot ask the disruption budget for a slot to drain node {node} for "
                f"{_cause(record)} ({error}), failing since {since:%H:%M:%S}Z: asked "
                f"again every {self._policy.poll_seconds} to {self._policy.budget_retry_seconds} s until "
                f"{deadline:%H:%M:%S}Z, {_then_undrained(record)}",
            ),
            timed_out=(
                f"Drain timed out before it began: the disruption budget could not be asked for a slot since "
                f"{since:%H:%M:%S}Z ({error}); nothing was evicted; {_ended(record)}"
            ),
            outcome="drain-timeout-reads-refused",
            found=found,
        )
        return self._asked_again(outcome, since, now, error.retry_after, deadline)

    def _asked_again(
        self, outcome: Outcome, since: datetime, now: datetime, retry_after: float | None, deadline: datetime
    ) -> Outcome:
        """A waiter's ask that fails (its node unread, its budget failing) and is to be asked again: from a poll up
        to the waiters' cadence (BudgetRetrySeconds), backing off with jitter (see :func:`_backing_off`)."""
        if not outcome.again:
            return outcome
        wait = _waiters_backoff(self._policy, since, now, retry_after, deadline)
        return Outcome.wait(wait, **outcome.changes)

    def _give_back_late(self, record: LifecycleRecord, node: str, found: dict[str, Any]) -> Outcome:
        """A late delivery's give-back of the slot it was granted for a lifecycle over. Its outcome is a wait whose
        commit loses (the record went on): nothing runs it again. A failure of the give-back (the API server fails
        the ConfigMap's write: 5xx, throttling, a conflict storm; or refuses it: 403) is therefore not raised into
        the engine, which took it for a failure of the step (StepRetries; a refusal told as a step refused, counted
        towards its message's failure) and retried nothing: the slot is left to what frees a lifecycle's over, the
        sweeper (its record finished) or its TTL, and logged so."""
        try:
            woken = self._slots.release(node, record.id, record.token)
        except (TransientError, Refused) as error:
            log.warning(
                "node %s: the slot a late delivery took for lifecycle %s, which is over, could not be given back "
                "(the sweeper frees it, or its TTL ends): %s",
                node,
                record.id,
                error,
            )
            retry_after = error.retry_after if isinstance(error, TransientError) else None
            wait = max(self._policy.budget_retry_seconds, retry_after_wait(retry_after))
            return Outcome.wait(wait, **found)
        _wake(self._dispatcher, woken)
        return Outcome.wait(self._policy.budget_retry_seconds, **found)

    def _gave_it_back(self, record: LifecycleRecord) -> bool:
        """Whether the lifecycle of ``record`` (as this delivery read it) has given its slot back, or is giving it
        back, as its record tells now (see :class:`RecordedLifecycles`). Read only for a slot the budget cannot
        vouch for (``SlotDecision.unmarked``, ``held_unmarked``: rare, after a re-creation of its ConfigMap), never
        on a drain's way otherwise."""
        return _gave_back(self._records.get(record.id), record.token, record.received_at)

    def _linked(self, record: LifecycleRecord, now: datetime) -> tuple[Outcome | None, bool]:
        """A terminate hook of an instance that a disruption without a hook (a Spot interruption, a
        rebalance recommendation, scheduled maintenance) drained or is draining: go on past the drain once that
        drain is over, rather than drain the node again (a slot and a wait for nothing). So too while the next
        maintenance's lifecycle waits on the record for its lead time: the drain for the one before it counts. Only
        a drain counts: a rebalance recommendation that this stack only cordons for evicted nothing, and the group's terminate hook that usually follows it
        must drain the node itself. Nor does a drain over while pods are on the node now (it timed out and
        left them, or the node was uncordoned after a maintenance and filled again, days before this hook):
        the hook drains the node itself, as if there had been no disruption. With the outcome (None: the slot's ask
        goes on), whether a drain for a disruption was found (see LINKED_NONE_AT)."""
        ids = {cause: record_id(record.instance_id, cause, "") for cause in LINKED_CAUSES}
        found = self._records.get_many(list(ids.values()))  # (one request for the three)
        for cause in LINKED_CAUSES:
            other = found.get(ids[cause])
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
                    return None, True
                log.info(
                    "instance %s is being drained for a %s: waiting for it", record.instance_id, cause.short
                )
                return Outcome.wait(LINKED_POLL_SECONDS), True
            try:
                back = podfilter.to_evict(self._cluster.pods_on(other.node)) if other.node else []
            except Refused as refusal:
                # Whether pods came back cannot be told: drained as any node, whose drain settles refused
                # reads by its timeout policy, rather than failing here at every delivery
                log.error(
                    "instance %s: the pods of its node may not be listed: %s", record.instance_id, refusal
                )
                self._metrics.count("EvictionErrors")
                return None, True
            except TransientError as error:
                # (the lists fail: 5xx, throttled, a continue token expired) Not told either: drained as any node,
                # whose polls retry failing lists within its timeout, rather than this step retried with the
                # engine's backoff (minutes a try, not a draining step) for as long as they fail
                log.warning(
                    "instance %s: the pods of its node cannot be listed: %s", record.instance_id, error
                )
                return None, True
            if back:
                log.info(
                    "instance %s was drained for a %s, but %d pods are on its node now: draining it again",
                    record.instance_id,
                    cause.short,
                    len(back),
                )
                return None, True
            log.info("instance %s was drained for a %s: completing at once", record.instance_id, cause.short)
            # what the plan does after its drain: its address released (the disruption's plan kept it, the
            # instance was still running), then the completion
            return Outcome.goto(
                settle_step(record),
                outcome=f"drained-by:{cause.short}",
                node=other.node,
                node_uid=other.node_uid,
                zone=other.zone,
            ), True
        return None, False


class RecordedLifecycles:
    """What the lifecycles' records tell the budget of a renewal's slot it cannot vouch for (see
    ``DisruptionBudget.renew``): the steps that renew (the eviction's polls) hold no record store."""

    def __init__(self, records: RecordStore) -> None:
        self._records = records

    def gave_back(self, request: SlotRequest) -> bool:
        return _gave_back(self._records.get(request.record_id), request.token, request.since)

    def over(self, record_id: str, token: object) -> bool:
        """Whether the lifecycle of ``token`` on the record ``record_id`` (as a node's claim names it) is over: its
        record finished or gone (expired), or another lifecycle started over on it since (the next maintenance of
        the instance, under a new token; not one it went by itself before its maintenance was moved earlier, see
        LifecycleRecord.goes_by). A lifecycle at its cleanup is not over: it lets go of its node there."""
        current = self._records.get(record_id)
        return current is None or current.finished or not current.goes_by(token)

    def drains(self, owner: str) -> list[DrainInProgress]:
        """``owner``'s lifecycles at their evictions, each the drain of the node its record names (one query of
        the open records). A drain paused for a lost slot is one too: its node is disrupted already, as the seed
        counts a paused drain its node shows. One past its eviction (completing, at its cleanup) disrupts nothing
        more; one before it (waiting, cordoning) has not begun to."""
        return [
            DrainInProgress(
                node=record.node,
                zone=record.zone,
                owner=record.owner,
                instance_id=record.instance_id,
                record_id=record.id,
                token=record.token,
                started=record.drain_started_at,
            )
            for record in self._records.open_records(owner)
            if record.step is Step.EVICT and record.node and not record.finished
        ]


def _gave_back(current: LifecycleRecord | None, token: str | None, began: datetime | None) -> bool:
    """Whether the lifecycle of ``token`` begun at ``began`` (as a delivery read its record) has given its slot
    back, or is giving it back, as its record tells now (``current``): finished, or at its cleanup (which never
    asks again: a watch of its node stays there for hours after the release). A lifecycle at any step before its
    cleanup keeps the slot: it is its own (this record id's), renewed by its drain, given back by its cleanup. So
    does another lifecycle that started over on the record (the next maintenance), whose asks would find a slot
    given back under the same token refused."""
    if current is None:
        return True  # (its record expired: a lifecycle over long ago)
    if (current.token, current.received_at) != (token, began):
        return False
    return current.finished or current.step is Step.CLEANUP


def _version(node: NodeInfo) -> dict[str, str | None]:
    """What LINKED_NONE_AT keeps of ``node``: its uid and resourceVersion (what any write to it moves)."""
    return {"uid": node.uid, "resource_version": node.resource_version}


def _claimed(node: NodeInfo) -> bool:
    """Whether ``node`` is claimed by a drain (of this stack or another): the disruptions' records are read at every
    ask then, as that drain may be a disruption's in progress, whose polls move nothing of the node."""
    return node.owner is not None or node.in_progress is not None


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


def _unlisted_yet(record: LifecycleRecord, now: datetime) -> bool:
    """Whether EC2 may not list the maintenance of ``record`` yet: it did not at intake, and AWS Health told of it
    less than MAINTENANCE_LISTED_WITHIN ago (EC2's list may lag Health's notice). Not listed, it is drained as Health
    tells it, not taken for one called off."""
    return not record.extra.get(MAINTENANCE_LISTED) and now - record.started_at < MAINTENANCE_LISTED_WITHIN


def _listed_start(record: LifecycleRecord, starts: list[datetime]) -> datetime | None:
    """The start of the maintenance of ``record`` as EC2 lists it: the earliest of the ``starts`` listed for its
    instance (its own, moved or not, or one before it). None: called off, as none is listed, or the earliest is
    later than its start and no earlier than the next lifecycle's on the record (SUCCESSOR): that one is the next
    maintenance's, which drains in its own time."""
    first = min(starts, default=None)
    if first is None or first <= record.global_deadline:
        return first
    successor = record.successor
    if successor is not None and successor.global_deadline <= first:
        return None
    return first


def _waiting_outside_since(record: LifecycleRecord) -> datetime | None:
    """Since when the lifecycle waits out of the budget's line: for another owner's drain of its node
    (OWNER_WAITING_SINCE), or its asks failing (ASK_UNREAD, ASK_BUDGET_FAILING), the earliest of those it notes; None:
    it does not, or no note can be read (then the ask looks at EC2, as a first ask does)."""
    stamps = []
    for key in (OWNER_WAITING_SINCE, ASK_UNREAD, ASK_BUDGET_FAILING):
        try:
            since = datetime.fromisoformat(str(record.extra.get(key)))
        except ValueError:
            continue
        if since.tzinfo is not None:
            stamps.append(since)
    return min(stamps, default=None)


def _claim_left_told(node: NodeInfo, record: LifecycleRecord, policy: DrainPolicy) -> str:
    """What CLAIM_LEFT_TOLD records of the claim of ``node`` told on it: its owner, and when the drain gives up."""
    return f"{node.owner} until {_gives_up_at(record, policy).isoformat()}"


def _gives_up_at(record: LifecycleRecord, policy: DrainPolicy) -> datetime:
    """When a drain that waits for another owner's drain of its node (or claim) gives up, its own action settled:
    its drain timeout after it began to ask. A hook's or a disruption's drain begins as it is received; a scheduled
    maintenance's at its due time, the lead before its start (it is received at AWS Health's notice, days or weeks
    before: timed from that, its timeout was over at its first ask, and it settled at once, untold on the node), and
    it gives up no later than its drain's deadline may be (see _deadline_cap)."""
    if record.transition is Transition.SCHEDULED_CHANGE:
        due = max(record.received_at, record.global_deadline - policy.maintenance_lead)
        return min(due + policy.timeout, _deadline_cap(record, policy))
    return record.received_at + policy.timeout


def _waiting_deadline(record: LifecycleRecord, policy: DrainPolicy) -> datetime:
    """Until when a waiter whose node or budget the API server fails at the slot's ask is held: the latest a drain
    could still begin before the action's global timeout, not its drain timeout. Time spent waiting for a slot never
    counts against a drain's own timeout (invariant 9), and an API server failing cluster-wide for longer than a
    drain timeout must not end every waiter's action at once: each instance would be terminated undrained, together,
    with the budget that was to space them out unread (invariant 11: the sweeper keeps the action alive while it
    waits, and the alarm's metric tells)."""
    return _deadline_cap(record, policy)
