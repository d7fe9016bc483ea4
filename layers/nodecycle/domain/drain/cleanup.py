"""The drain's cleanup: clear the annotations in one PATCH, release the slot, wake the next waiters; and the
watches of a node kept cordoned (into the warm pool, through scheduled maintenance)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from nodecycle.domain.completion import SETTLED_ELSEWHERE
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.common import (
    NODE_SEEN,
    RELEASE_FAILING_FOR,
    _at_once,
    _failing_for,
    _known,
    _node_as_seen,
    _of_instance,
    _seen,
    _set_on_node,
    _unseen,
)
from nodecycle.domain.engine import DRAIN_RETRY_CAP_SECONDS, Outcome
from nodecycle.domain.errors import AccessRefused, TransientError, retry_after_wait
from nodecycle.domain.model import (
    CARRIED_OVER,
    ENDS_ITS_INSTANCE,
    EXPIRY_UNTOLD,
    KEPT_ON_NODE,
    MAINTENANCE_LISTED,
    RESUMING_SPOT_ACTIONS,
    SET_ON_NODE,
    SPOT_ACTION,
    SPOT_WATCH,
    SUCCESSOR,
    WARM_POOL,
    LifecycleRecord,
    Step,
    Transition,
    global_deadline,
    may_carry_over,
)
from nodecycle.domain.nodes import CLOCK_SKEW, SAME_BOOT_AFTER, renewed_on_the_same_boot
from nodecycle.domain.ports.budget import Slots
from nodecycle.domain.ports.cluster import Claim, Cluster, Events, NodeInfo, Refused
from nodecycle.domain.ports.instances import GONE_STATES, STOP_STATES, MaintainedInstances, ScheduledEvent, up
from nodecycle.domain.ports.lifecycle import Autoscaling
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

# (record.extra's SET_ON_NODE: what nodecycle itself set on the node when it claimed it; see the model)
# record.extra key: a node gone into the warm pool with its cordon kept, watched for the moment it may be lifted
POOL_WATCH = "pool_watch"
POOL_IDLE = "pool_idle"  # record.extra key: its node was found waiting in a running warm pool (told once)
POOL_POLL_SECONDS = 10  # how often a cleanup into the warm pool looks at its node until it may uncordon it
# A stopped instance's node is NotReady a minute after the stop. Still Ready after this, the instance waits in
# a running pool (PoolState Running): it is looked at less often, until it leaves the pool.
POOL_WATCH_SECONDS = 15 * 60
POOL_IDLE_POLL_SECONDS = 60
# The states of an instance stopped in its warm pool (a Stopped or a Hibernated pool's): its kubelet is back only
# once Auto Scaling starts it again, as it takes it out of the pool. One that waits there running (Warmed:Running),
# or is on its way there (Warmed:Pending:Proceed, not stopped yet), has a kubelet that may come back any time.
STOPPED_IN_POOL = ("Warmed:Stopped", "Warmed:Hibernated")
# record.extra keys of the warm pool's watch: the pool state a look last found the instance in; when a look last found
# it stopped there (a renewal of its node's Lease stamped later than that, by more than CLOCK_SKEW, is a kubelet's
# that runs again); and the Lease's renewTime (NO_LEASE: none) at the first look that found it out of the pool with
# its node Ready, not renewed after such a look (renewed since that look: its kubelet runs again). See
# Cleanup._kubelet_awake.
POOL_STATE_SEEN = "pool_state_seen"
POOL_ASLEEP_SEEN = "pool_asleep_seen"
POOL_LEFT_LEASE = "pool_left_lease"
# record.extra key: a node drained for scheduled maintenance, its cordon kept, watched since then for the moment
# the maintenance is over
MAINTENANCE_WATCH = "maintenance_watch"
# How often that watch looks (EC2, Auto Scaling, the node) once the maintenance may have begun, in drain polls
# (DrainPollSeconds): once a minute at the template's 5 s; before its window it sleeps until the window opens
MAINTENANCE_POLLS_PER_LOOK = 12
MAINTENANCE_POLL_SECONDS = MAINTENANCE_POLLS_PER_LOOK * 5
# (record.extra's SPOT_WATCH: a node drained for a Spot interruption that stops or hibernates its instance, its cordon
# kept, watched for the moment EC2 has started the instance again; see the model)
# record.extra key: since when EC2 was seen to have stopped that instance (a look that finds it running before that
# may come before the interruption struck)
SPOT_DOWN_SEEN = "spot_down_seen"
# An instance running this long after its interruption struck, never seen stopped by a look, was stopped and started
# again between two looks (or EC2 did not interrupt it after all): it runs, and its node is uncordoned once Ready.
SPOT_RESTART_UNSEEN_AFTER = timedelta(minutes=10)
# EC2 starts a stopped Spot instance again when capacity comes back: minutes, or days. Looked at every
# MAINTENANCE_POLL_SECONDS for this long after the interruption, then every SPOT_IDLE_POLL_SECONDS, until
# SPOT_WATCH_LIMIT, when the watch ends with the cordon kept (told: an operator looks)
SPOT_BRISK_FOR = timedelta(minutes=15)
SPOT_IDLE_POLL_SECONDS = 300
SPOT_WATCH_LIMIT = timedelta(days=2)
# A maintenance EC2 still lists as pending this long after its window's end (NotAfter) is over all the same
MAINTENANCE_OVER_AFTER = timedelta(minutes=15)
# Windows are hours. A watch still waiting this long after the maintenance's start (a kubelet that never came
# back, an instance left in Standby) ends with the cordon kept, as before there was a watch: an operator looks.
MAINTENANCE_WATCH_LIMIT = timedelta(days=2)
# What joins a maintenance's token to the start it was moved to, in the token of the lifecycle for that start
MOVED_TOKEN = "#moved-"
# record.extra key: a node drained for its instance's root volume replacement (an instance refresh's
# ReplaceRootVolume), its cordon kept through the reboot, watched since then for the instance back in service
ROOT_VOLUME_WATCH = "root_volume_watch"
# The launch hooks hold the instance again once its volume is replaced (Pending:Wait), up to their global timeout (48
# hours at most): a watch still waiting after that, and a margin, ends with the cordon kept (told: an operator looks)
ROOT_VOLUME_WATCH_LIMIT = timedelta(days=2, hours=1)
# record.extra key: the boot id (status.nodeInfo.bootID) its kubelet posted the node's status from before the
# reboot (see _boot_before): while the node says that one, its Ready is still the old kubelet's
BOOT_BEFORE = "boot_before"
# record.extra key: the node's Lease renewTime (NO_LEASE: none) at the first look of a watch (after a maintenance, a
# Spot stop, a root volume replacement) that found the instance back and the node Ready on the boot from before it (see
# Cleanup._kubelet_back)
LEASE_AT_OVER = "lease_at_over"
NO_LEASE = "none"
# record.extra key: the node's Ready lastHeartbeatTime (NO_LEASE: none told) at that same first look: a status posted
# since is a kubelet's of now, a renewed Lease alone is not (see Cleanup._kubelet_back)
HEARTBEAT_AT_OVER = "heartbeat_at_over"
# Auto Scaling lifecycle states (prefixes) of an instance that is not coming back to its group's service after
# a maintenance: terminated, detached, or gone into its warm pool (a wider set than the engine's
# TERMINATION_STATES, which says only whether a launch action ended with its instance)
NOT_COMING_BACK_STATES = ("Terminating", "Terminated", "Detaching", "Detached", "Warmed")
# record.extra key: since when each release of the node fails: it conflicts (409: the node changed between its read
# and the PATCH), or the API server fails it (a validating webhook on nodes that is down, 5xx, 429)
RELEASE_FAILING = "release_failing"
# record.extra keys: since when a watch after the release fails (its PATCH of the node conflicts or fails as the
# API server's failure, or one of its looks is not answered), and that it was told
WATCH_FAILING = "watch_failing"
WATCH_FAILING_TOLD = "watch_failing_told"
# A watch that keeps failing is tried again at once only for RELEASE_FAILING_FOR (a concurrent writer, a blip), then
# at its own pace, told: no slot is held any more, but tried at once for as long as a conflict storm or a webhook
# that is down lasts, it would be a hot loop of API calls and log lines for hours. Failing this long, the watch
# ends as a refused release does: told, the cordon it kept left to an operator.
WATCH_FAILING_LIMIT = timedelta(hours=1)
# record.extra key: since when the question whether the hook still holds the instance of a lifecycle that may be
# carried over is not answered (see Cleanup._carried_over). Its own clock, not the release's (RELEASE_FAILING): the
# release that follows the answer, or the giving up, has its own RELEASE_FAILING_FOR of tries at once.
CARRY_OVER_FAILING = "carry_over_failing"
CONFLICT = "the node changed between its read and the PATCH (HTTP 409 Conflict)"
# The Event a watch that ends with the cordon kept writes, and what it was kept after
MAINTENANCE_AFTER = ("CordonKeptAfterMaintenance", "scheduled maintenance")
SPOT_AFTER = ("CordonKeptAfterSpotInterruption", "Spot interruption")
ROOT_VOLUME_AFTER = ("CordonKeptAfterRootVolumeReplacement", "root volume replacement")


class _ReleaseFailed(Exception):
    """The cleanup's release PATCH failed as the API server's failure (see ``Cleanup._release_patch``)."""

    def __init__(self, error: TransientError) -> None:
        super().__init__(str(error))
        self.error = error


def _watching(record: LifecycleRecord, key: str, now: datetime) -> tuple[datetime, dict[str, Any]]:
    """When a watch after the cleanup began (its record.extra ``key``; now for its first look), and the
    changes that keep it going."""
    since = datetime.fromisoformat(str(record.extra.get(key) or now.isoformat()))
    # (a look that got this far is answered: a failure after it counts afresh)
    kept = {
        name: value for name, value in record.extra.items() if name not in (WATCH_FAILING, WATCH_FAILING_TOLD)
    }
    return since, {"extra": {**kept, key: since.isoformat()}}


class Cleanup:
    """After completion: clear our annotations, give the slot back, wake whoever may use it now.

    A node comes back uncordoned when its instance is coming back: still in service because the action this
    lifecycle drained for was not Auto Scaling's to end (it was no longer active: completed elsewhere, timed
    out, or never issued) and the instance stayed; or into a warm pool, once nothing can be scheduled on it
    before it is back in service (see ``_hold`` and ``_lift_when_safe``); or after scheduled maintenance (a reboot), once it is over
    and the instance stayed in service (see ``_lift_after_maintenance``); or after a Spot interruption that
    stopped or hibernated the instance, once EC2 has started it again (see ``_lift_after_restart``); or after
    its root volume replacement, once the instance is back in service (see ``_lift_after_root_volume``).
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
        maintenance_lead: timedelta = timedelta(hours=1),
    ) -> None:
        """``maintenance_lead``: how long before its start a maintenance is drained (MaintenanceLeadMinutes), for one
        EC2 lists later than the start drained for (see ``_moved``)."""
        self._cluster = cluster
        self._slots = slots
        self._dispatcher = dispatcher
        self._autoscaling = autoscaling
        self._metrics = metrics
        self._events = events
        self._instances = instances
        self._maintenance_poll_seconds = maintenance_poll_seconds
        self._maintenance_lead = maintenance_lead

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        outcome = self._cleanup(record, now)
        if record.extra.get(EXPIRY_UNTOLD) and "extra" not in outcome.changes:
            # (decided, not carried over: its commit tells the expiry; see engine.gone_counted)
            extra = {key: value for key, value in record.extra.items() if key != EXPIRY_UNTOLD}
            return replace(outcome, changes={**outcome.changes, "extra": extra})
        return outcome

    def _cleanup(self, record: LifecycleRecord, now: datetime) -> Outcome:
        if record.node is None:
            return Outcome.next()
        if record.extra.get(POOL_WATCH):
            return self._watch(self._lift_when_safe, record, now, POOL_WATCH, POOL_IDLE_POLL_SECONDS)
        if record.extra.get(MAINTENANCE_WATCH):
            pace = self._maintenance_poll_seconds
            return self._watch(self._lift_after_maintenance, record, now, MAINTENANCE_WATCH, pace)
        if record.extra.get(SPOT_WATCH):
            return self._watch(
                self._lift_after_restart, record, now, SPOT_WATCH, self._spot_pace(record, now)
            )
        if record.extra.get(ROOT_VOLUME_WATCH):
            pace = self._maintenance_poll_seconds
            return self._watch(self._lift_after_root_volume, record, now, ROOT_VOLUME_WATCH, pace)
        # (its metadata only, when it is the node the drain's last poll read whole: its annotations are what count)
        try:
            node, _ = _node_as_seen(self._cluster, record, record.node)
        except (TransientError, Refused) as error:
            # The API server fails the read (an etcd that times out, 5xx, throttling): a release that fails, as its
            # PATCH failing is (see below); or refuses it (RBAC): a refused release. Raised, the slot was held,
            # retried with the engine's backoff (a refusal: into the dead-letter queue), until its holder expired,
            # past the drain's timeout, force grace and margin (invariant 10)
            log.warning("node %s of the release cannot be read: %s", record.node, error)
            if isinstance(error, TransientError):
                again = _at_once(record.extra, RELEASE_FAILING, now, error.retry_after)
                if again is not None:
                    return again
                why = f"{error}, at every try since {record.extra[RELEASE_FAILING]}"
            else:
                why = f"reading the node: {error}"
            self._told_refused(record.node, record.node_uid, record, why)
            node = None
        if node is not None:
            carried = self._carried_over(record, node, now)
            if carried is not None:
                return carried
        # (not carried over: what follows is the release of a lifecycle whose action is gone, its expiry told by the
        # commit of its outcome: see engine.gone_counted)
        record = record.model_copy(
            update={"extra": {key: value for key, value in record.extra.items() if key != EXPIRY_UNTOLD}}
        )
        into_pool = record.transition.has_hook and record.destination == WARM_POOL
        # Drained for scheduled maintenance: whether the instance stays (a reboot) or goes (a stop, a
        # retirement), only the maintenance's end tells
        maintained = record.transition is Transition.SCHEDULED_CHANGE and record.drain_started_at is not None
        # Drained for a Spot interruption that stops or hibernates the instance: EC2 starts it again when capacity
        # comes back, its node Ready again and still cordoned (no one else lifts it). Its cordon is kept as for any
        # Spot interruption (see _release), and lifted once the instance runs again (see _lift_after_restart).
        resuming = (
            record.transition is Transition.SPOT_INTERRUPTION
            and record.extra.get(SPOT_ACTION) in RESUMING_SPOT_ACTIONS
            and record.drain_started_at is not None
        )
        # Drained for a root volume replacement: the instance reboots on its new volume and comes back to service
        # under the same node object, still cordoned (no kubelet lifts a cordon). Released as a termination's, the
        # cordon stayed for good, whatever its action's end: a refresh of the group left every node cordoned. Kept
        # through the reboot, it is lifted once the instance is back in service (see _lift_after_root_volume).
        replaced = record.replaces_root_volume and record.drain_started_at is not None
        watched = record  # what a watch after the release starts from
        if node is not None:
            held = into_pool or maintained or replaced
            failure, retry_after = None, None
            try:
                released = self._patched(
                    node,
                    record,
                    lambda: self._hold(node, record) if held else self._release(node, record, now),
                )
            except _ReleaseFailed as failed:
                log.warning("release of node %s failed: %s", node.name, failed.error)
                released, failure, retry_after = None, str(failed.error), failed.error.retry_after
            if released is Claim.CONFLICT:
                failure = CONFLICT
            if failure is not None:
                # Read again and released again at once (no sooner than a Retry-After). Not for ever: the slot is
                # given back only after the release, and a failure that goes on (a conflict storm, a webhook that
                # is down) would hold it until its holder expires, past the drain's timeout and force grace
                # (invariant 10). Once it outlasts RELEASE_FAILING_FOR the release is refused, as a webhook's
                # refusal is: told, and the slot given back.
                again = _at_once(record.extra, RELEASE_FAILING, now, retry_after)
                if again is not None:
                    return again
                since = record.extra[RELEASE_FAILING]
                self._told_refused(node.name, node.uid, record, f"{failure}, at every try since {since}")
                released = None
            if released is Claim.CLAIMED:  # (patched: the node as read is not the node any more)
                watched = record.model_copy(update={"extra": _unseen(record.extra)})
        gone = record.instance_id if record.extra.get(ENDS_ITS_INSTANCE) else None
        try:
            waiters = self._slots.release(_known(record.node, "node"), record.id, record.token, gone=gone)
        except TransientError as error:
            # The budget ConfigMap's reads or writes fail (5xx, throttled, conflicts past the store's retries). Raised,
            # the cleanup went to the engine's backoff (no draining step: up to 3 minutes a try), and a budget back
            # after a minute or two had the slot given back minutes later, idle meanwhile while nodes waited
            # (invariant 10). Asked again at a drain's retry cadence; the node's release is done, or given up and
            # told: the next try finds nothing of this lifecycle's left on it.
            log.warning("the slot of node %s cannot be given back yet: %s", record.node, error)
            delay = max(DRAIN_RETRY_CAP_SECONDS, retry_after_wait(error.retry_after))
            return Outcome.wait(delay, extra=watched.extra)
        self._dispatcher.wake_each(waiters)
        # (told even when the node is gone already: its events are read by its name and uid)
        self._settled(record, node.uid if node is not None else record.node_uid)
        if into_pool:
            return self._watch(self._lift_when_safe, watched, now, POOL_WATCH, POOL_IDLE_POLL_SECONDS)
        if (maintained or resuming or replaced) and node is not None:
            # (the boot its watch must see the node leave, or its kubelet live on, before it lifts the cordon)
            before = _boot_before(record, node)
            if before:
                watched = watched.model_copy(update={"extra": {**watched.extra, BOOT_BEFORE: before}})
        if maintained:
            pace = self._maintenance_poll_seconds
            return self._watch(self._lift_after_maintenance, watched, now, MAINTENANCE_WATCH, pace)
        if resuming:
            pace = self._spot_pace(record, now)
            return self._watch(self._lift_after_restart, watched, now, SPOT_WATCH, pace)
        if replaced:
            pace = self._maintenance_poll_seconds
            return self._watch(self._lift_after_root_volume, watched, now, ROOT_VOLUME_WATCH, pace)
        return Outcome.next()

    def _carried_over(self, record: LifecycleRecord, node: NodeInfo, now: datetime) -> Outcome | None:
        """A terminate lifecycle whose token's action ended while its hook still holds its instance under another
        action, its node still claimed and cordoned by it: carried over to that action, its drain going on where it
        was, named by the instance (CARRIED_OVER); None for any other.

        A token is one action of one instance, but Auto Scaling may take a call's token alone (it does not say it
        refuses one named with another instance): a message on the intake queue that names a terminating instance
        with another terminating instance's live token, taken in before that one's own event (which intake then
        refuses: the token is held), is confirmed, takes a slot for the instance's node and cordons it. When the
        token's action ends (the other instance's adoption completes it, by its instance), this lifecycle finds it
        gone. Cleaned up as any, it cleared the node's claim and gave its slot back with the node left cordoned, its
        instance leaving service under its own action, not yet taken in: a node cordoned outside the budget, and a
        claim cleared while its instance's action was open (seed 94). That action is the hook's for this very
        instance, which Auto Scaling confirms by a heartbeat named by the instance: its drain, begun, goes on in the
        slot it holds, and its completion, named by the instance as every completion is, settles it. The instance's
        own event, when it comes, finds this lifecycle's claim of a later start than its own and goes on beside it,
        waiting for the node, and ends at its check once this one completed the action (as beside an adoption).

        Once only, and only for a node this lifecycle still claims (another lifecycle of the instance that claimed
        it since drains it) and a drain it began. A timed-out action leaves no action of the hook (the instance
        went on), and another hook's holds none of this one: a heartbeat by the instance finds nothing, and the
        cleanup goes on as ever."""
        if (
            record.outcome != "action-expired"
            or not may_carry_over(record)
            or node.owner != record.owner
            or node.lifecycle != record.id
            or not _of_instance(node, record)
        ):
            return None
        carried = {**record.extra, CARRIED_OVER: record.token}
        try:
            held = self._autoscaling.heartbeat(record.model_copy(update={"extra": carried}).action)
            began = self._own_action_began(record, now) if held else None
        except TransientError as error:
            # Not answered: asked again at once for a while, as a release that fails. On a clock of its own: on the
            # release's (RELEASE_FAILING), a question throttled for a few seconds used up the release's tries at
            # once, and the first conflict of its PATCH (a node's version moves with every status update) or a
            # throttled look at the instance's state gave the release up at once, told as refused (the
            # EvictionErrors alarm), with the claim left on the node.
            log.warning("whether the hook still holds %s cannot be told yet: %s", record.instance_id, error)
            again = _at_once(record.extra, CARRY_OVER_FAILING, now, error.retry_after)
            if again is not None:
                return again
            failing = _failing_for(record.extra, CARRY_OVER_FAILING, now)
            if isinstance(error, AccessRefused) or failing >= timedelta(seconds=record.heartbeat_timeout):
                # Refused (a policy: it does not lift by itself), or not answered for a whole heartbeat timeout:
                # cleaned up as ever, the expiry told (an action the hook still holds is an orphan then, which the
                # sweeper keeps alive and adopts). It keeps its clock: asked again by a next run of the release, it
                # is not waited for again.
                return None
            # Then at a drain's retry pace, the node's claim and cordon and the slot kept: a question not answered
            # is no answer. Given up after the tries at once (Auto Scaling's rate is the account's and region's,
            # shared with a refresh's heartbeats and completions), the cleanup cleared the claim and gave the slot
            # back with the node left cordoned while the hook held the instance under its open action (seed 94)
            delay = max(DRAIN_RETRY_CAP_SECONDS, retry_after_wait(error.retry_after))
            return Outcome.wait(delay, extra=record.extra)
        if not held:
            return None
        self._metrics.count("Heartbeats")
        if began is None:
            # (no activity of the group names the instance: nothing dates the action the hook holds, and a
            # deadline kept from the crossed message may be later than Auto Scaling's. Cleaned up as ever, the
            # expiry told: the sweeper adopts that action, dated by the last listing before this lifecycle hid it)
            log.warning(
                "hook %s still holds instance %s, but Auto Scaling lists no activity of group %s that names it: "
                "its action's start is unknown, the lifecycle is not carried over",
                record.hook,
                record.instance_id,
                record.group,
            )
            return None
        log.warning(
            "the action of token %s is over, but hook %s still holds instance %s under another action: the "
            "lifecycle was taken in from a message that named the instance with another's token; its drain of "
            "node %s goes on for the instance's own action",
            record.token,
            record.hook,
            record.instance_id,
            node.name,
        )
        # (its expiry told as carried over by this outcome's commit: see engine.gone_counted)
        dropped = (EXPIRY_UNTOLD, CARRY_OVER_FAILING, RELEASE_FAILING)
        kept = {key: value for key, value in carried.items() if key not in dropped}
        # Guarded by the global timeout of the action it now goes on for: the crossed message's was reckoned from
        # that message's time (the other instance's action, or whatever its sender wrote), which may be later than
        # this action's start; Auto Scaling applies the hook's default result at this action's, however long the
        # drain. The earlier of the two (the activity begins a little before the action it holds the instance by).
        deadline = min(record.global_deadline, global_deadline(began, record.heartbeat_timeout))
        guarded = record.model_copy(update={"global_deadline": deadline})
        renewed = guarded.renewed(self._autoscaling.renewed_at(now))
        return Outcome.goto(
            Step.EVICT,
            outcome=None,
            extra=kept,
            verified_at=now,
            global_deadline=deadline,
            heartbeat_deadline=renewed.heartbeat_deadline,
            heartbeats=renewed.heartbeats,
            heartbeat_retry_at=None,
        )

    def _own_action_began(self, record: LifecycleRecord, now: datetime) -> datetime | None:
        """No later than when the action the hook holds ``record``'s instance by began: the start of the group's
        activity that holds it (DescribeScalingActivities; no other API dates an action). Looked for over the last
        global timeout: an action begun before that is over."""
        reach = global_deadline(now, record.heartbeat_timeout) - now
        return self._autoscaling.activity_started(record.group, record.instance_id, now - reach)

    def _watch(
        self,
        look: Callable[[LifecycleRecord, datetime], Outcome],
        record: LifecycleRecord,
        now: datetime,
        key: str,
        pace: float,
    ) -> Outcome:
        """One look of the watch ``key`` (record.extra: since when it watches), whose failure is the watch's, not
        the step's: a PATCH of the node that conflicts (409) or that the API server fails (a webhook that is down,
        5xx, 429), a read of the node, Auto Scaling or EC2 not answered or refused. Tried again at once (no sooner
        than a Retry-After) for RELEASE_FAILING_FOR, then at ``pace`` (the watch's own, told once: a Warning event
        and the alarm), and ended at WATCH_FAILING_LIMIT as a refused release is (told; the cordon it kept left to
        an operator). Raised, each failure went to the engine's retries (unbounded, or into the dead-letter queue
        for a refusal), and a conflict was tried again every second, for as long as it lasted."""
        try:
            return look(record, now)
        except (TransientError, Refused) as error:
            failure, retry_after = str(error), getattr(error, "retry_after", None)
        log.warning("watch %s of node %s failed: %s", key, record.node, failure)
        extra = {**record.extra, key: record.extra.get(key) or now.isoformat()}
        again = _at_once(extra, WATCH_FAILING, now, retry_after)
        if again is not None:
            return again
        since = extra[WATCH_FAILING]
        failing_since = datetime.fromisoformat(str(since))
        why = f"{failure}, at every try since {since}"
        node, uid = _known(record.node, "node"), record.node_uid
        if now - failing_since >= WATCH_FAILING_LIMIT:
            log.error("watch %s of node %s ends, the cordon kept: %s", key, node, why)
            self._metrics.count("EvictionErrors")  # the alarm: an operator must look
            self._events.on_node(
                node,
                uid,
                "ReleaseRefused",
                f"nodecycle ({record.owner}) gave up lifting the cordon it kept on the node after the lifecycle of "
                f"{record.instance_id}: {why}; the cordon is left to an operator (kubectl uncordon once the "
                "instance is back in service)",
                warning=True,
            )
            return Outcome.next()
        if not extra.get(WATCH_FAILING_TOLD):
            log.error("the cordon nodecycle kept on node %s cannot be lifted yet: %s", node, why)
            self._metrics.count("EvictionErrors")  # the alarm: an operator must look
            self._events.on_node(
                node,
                uid,
                "ReleaseFailing",
                f"nodecycle ({record.owner}) cannot look at or lift the cordon it kept on the node after the "
                f"lifecycle of {record.instance_id}: {why}; tried again every {pace:.0f} s until "
                f"{failing_since + WATCH_FAILING_LIMIT:%H:%M:%S}Z, then left to an operator",
                warning=True,
            )
            extra[WATCH_FAILING_TOLD] = True
        return Outcome.wait(max(pace, retry_after_wait(retry_after)), extra=extra)

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
            self._told_refused(node.name, node.uid, record, str(refusal))
            return None

    def _release_patch(self, node: NodeInfo, **changes: Any) -> Claim:
        """The cleanup's own release of the node (not a watch's), whose transient failure is the release's (see
        ``__call__``), not the step's; as is a failed read of Auto Scaling before it (see ``_coming_back``)."""
        try:
            return self._cluster.release_node(node, **changes)
        except TransientError as error:
            raise _ReleaseFailed(error) from error

    def _told_refused(self, node: str, uid: str | None, record: LifecycleRecord, why: str) -> None:
        """A release of the node the API server refuses, told (see ``_patched``)."""
        log.error("release of node %s refused: %s", node, why)
        self._metrics.count("EvictionErrors")  # the alarm: an operator must look
        self._events.on_node(
            node,
            uid,
            "ReleaseRefused",
            f"nodecycle ({record.owner}) could not clear its annotations of the lifecycle of "
            f"{record.instance_id}, nor lift what it set on the node: refused by the API server: {why}",
            warning=True,
        )

    def _hold(self, node: NodeInfo, record: LifecycleRecord) -> Claim | None:
        """Into the warm pool: clear this lifecycle's annotations and mark the node as released for it, but
        keep the cordon. Auto Scaling stops the instance only after the completion, and its node stays Ready
        for a minute after that: uncordoned now, it would take the very pods just evicted from it, which the
        stop then kills, without eviction or PodDisruptionBudget. (Freed by the stop already: marked.)"""
        if node.owner == record.owner and node.lifecycle in (None, record.id):
            return self._release_patch(node, released_for=record.id)
        return None

    def _marked_node(self, record: LifecycleRecord) -> tuple[NodeInfo | None, LifecycleRecord]:
        """The instance's node while it is still marked released for this lifecycle (a watch's cordon is its
        own only so long: a later claim of the node removes the mark); None otherwise. With the record keeping the
        node as read whole (NODE_SEEN): a watch looks every few seconds, for minutes or hours, and reads the
        node's metadata only while it has not changed."""
        node, whole = _node_as_seen(self._cluster, record, _known(record.node, "node"))
        if node is None or node.released_for != record.id or not _of_instance(node, record):
            return None, record
        if whole:
            record = record.model_copy(update={"extra": _seen(record.extra, node)})
        return node, record

    def _lift_set(self, node: NodeInfo, record: LifecycleRecord) -> Claim | None:
        """Lift what this lifecycle set on the node (its SET_ON_NODE note: the cordon, the load balancer label),
        and its mark; None when the API server refuses it (told)."""
        undo = _set_on_node(record.extra.get(SET_ON_NODE) or {})
        return self._patched(
            node,
            record,
            lambda: self._cluster.release_node(node, uncordon=undo["cordon"], unlabel=undo["lb"]),
        )

    def _lift_told(self, node: NodeInfo, record: LifecycleRecord, reason: str, message: str) -> Outcome:
        """The end of a watch whose instance is back in service with its node Ready (after a maintenance, after a
        Spot interruption that stopped it): what this lifecycle set on the node lifted, and told on the node
        (``reason``, ``message``). A conflict is the watch's failure (tried again: see _watch); a refusal was told,
        the cordon stays."""
        lifted = self._lift_set(node, record)
        if lifted is Claim.CONFLICT:
            raise TransientError(CONFLICT)
        if lifted is None:
            return Outcome.next()
        log.info("node %s is uncordoned: %s", node.name, message)
        self._events.on_node(node.name, node.uid, reason, message)
        return Outcome.next()

    def _lift_when_safe(self, record: LifecycleRecord, now: datetime) -> Outcome:
        """Lift what this lifecycle set on the node once nothing can be scheduled on it before it is back in
        service: its instance is stopped (or hibernated) in the pool and its kubelet gone (NotReady: the node
        controller's taint keeps pods off until the instance is started, which only its leaving the pool does), or
        the instance left the pool, its node NotReady or its kubelet running again (see _kubelet_awake). Not for a node NotReady while its instance runs (in a Running pool, or not
        stopped yet): a kubelet restarted, a runtime that hung, a network cut for a minute, and the node is Ready
        again with its instance still in the pool, schedulable, pods sent to an instance out of service that the
        pool's shrinking terminates undrained. Only while the node is still marked released for this lifecycle (a
        later claim of the instance's node removes the mark: that cordon is the later lifecycle's)."""
        node, record = self._marked_node(record)
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
        left = not state.startswith("Warmed:")
        if left and node.ready:
            # Out of the pool, its node Ready: maybe still as the kubelet left it before the stop (see _kubelet_awake)
            awake, extra = self._kubelet_awake(node, watching["extra"])
            if not awake:
                return Outcome.wait(POOL_POLL_SECONDS, extra=extra)
        if left or (state in STOPPED_IN_POOL and not node.ready):
            if self._lift_set(node, record) is Claim.CONFLICT:
                raise TransientError(CONFLICT)  # (the watch's failure: see _watch)
            return Outcome.next()
        seen = {
            POOL_STATE_SEEN: state,
            **({POOL_ASLEEP_SEEN: now.isoformat()} if state in STOPPED_IN_POOL else {}),
        }
        watching = {"extra": {**watching["extra"], **seen}}
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

    def _kubelet_awake(self, node: NodeInfo, extra: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """Whether the kubelet of a Ready node whose instance left the warm pool runs again, with the watch's extra to
        keep. An instance stopped or hibernated in the pool runs no kubelet until Auto Scaling takes it out (Pending,
        Pending:Wait under the launch hooks) and EC2 has started or resumed it, tens of seconds later; its node says
        Ready as the kubelet left it before the stop until the node monitor's grace (40 s) is over since its last
        Lease renewal, and a hibernation shorter than that never turns it NotReady at all. Lifted as the instance left
        the pool, the cordon went while the kubelet slept: pods were scheduled onto an instance that could not run
        them (or lost them, failing to resume). A kubelet that runs renews its Lease every 10 s (and creates it again
        if it is gone): a renewal stamped later than a look that found the instance stopped in the pool (by more than
        CLOCK_SKEW, the kubelet's clock against this one), or one since the first look that found it out of the pool,
        is a kubelet's that runs again. An instance last seen in a Running pool never stopped its kubelet; a Lease it
        may not read (403: an RBAC from before the rule) leaves the Ready alone to tell, as the readiness gate does."""
        # (a watch from before POOL_STATE_SEEN was kept: one gone idle found its node Ready for POOL_WATCH_SECONDS in
        # the pool, which a stopped instance's is not)
        if extra.get(POOL_STATE_SEEN, "Warmed:Running" if extra.get(POOL_IDLE) else None) == "Warmed:Running":
            return True, extra
        read, renewed = self._lease(node, "runs again out of the warm pool")
        if not read:
            return True, extra
        asleep = extra.get(POOL_ASLEEP_SEEN)
        if renewed is not None and asleep and renewed > datetime.fromisoformat(str(asleep)) + CLOCK_SKEW:
            return True, extra
        stamp = renewed.isoformat() if renewed is not None else NO_LEASE
        seen = extra.get(POOL_LEFT_LEASE)
        if seen is None:
            return False, {**extra, POOL_LEFT_LEASE: stamp}
        awake = renewed is not None and stamp != seen
        if not awake:
            log.info(
                "node %s says Ready out of the warm pool, its kubelet not running yet: cordon kept", node.name
            )
        return awake, extra

    def _lease(self, node: NodeInfo, back: str) -> tuple[bool, datetime | None]:
        """Whether the node's Lease could be read, and its renewTime (None: no Lease), for the watches that tell a
        kubelet that runs again from the Ready its node kept (the warm pool's, the reboots'). A read the API server
        refuses (403: an RBAC from before the Lease rule) is logged, saying that the node's Ready alone tells that its
        kubelet ``back``, as the readiness gate takes it: refused for good, a watch that waited for the Lease would
        keep the cordon until its limit on a node back in service."""
        try:
            return True, self._cluster.lease_renewed_at(node.name)
        except Refused as error:
            log.warning(
                "the Lease of node %s cannot be read (%s): its Ready alone tells that its kubelet %s",
                node.name,
                error,
                back,
            )
            return False, None

    def _lift_after_maintenance(self, record: LifecycleRecord, now: datetime) -> Outcome:
        """Lift what this lifecycle set on the node once the maintenance it drained for is over and the
        instance stayed: EC2 no longer lists it as pending (carried out, or called off), or its window ended a
        margin ago; the instance runs, in service in its group; and its node is Ready again, by a kubelet that
        is back (the rebooted one: a new boot id; or the one that ran, its Lease renewed: see _kubelet_back). Until then the cordon stays: the maintenance may still come, and a node whose kubelet
        is not back takes no pods. An instance that goes (stopped, retired, terminating, out of its group)
        keeps it: it is not coming back. Only while the node is still marked released for this lifecycle, as
        in the warm-pool watch (a later claim removes the mark: that cordon is the later lifecycle's). Not when
        the next maintenance's lifecycle follows on the record: it takes the cordon over (KEPT_ON_NODE), and
        lifts it once that maintenance is over too."""
        node, record = self._marked_node(record)
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
        if not up(state) or in_group is None or in_group.startswith(NOT_COMING_BACK_STATES):
            why = f"instance {instance} is not coming back ({state or 'gone'}, {in_group})"
            return self._kept(node, record, why, leaving=True)
        listed = self._instances.scheduled_events(instance)
        ahead = [event for event in listed if _may_come(event, record, now)]
        back = state == "running" and in_group == "InService" and node.ready
        later = [event.not_before for event in listed if event.not_before > max(record.global_deadline, now)]
        kubelet_back = True
        if not ahead and back:
            kubelet_back, extra = self._kubelet_back(node, record, watching["extra"], now)
            watching = {"extra": extra}
        if not ahead and later:
            if (
                back
                and not kubelet_back
                and min(later) - self._maintenance_lead - now
                > timedelta(seconds=self._maintenance_poll_seconds)
            ):
                # A reboot carried out as a later maintenance is listed, which this look takes for a move: lifted
                # now, the cordon went on the Ready left from before the reboot. The next look's Lease (or boot id)
                # tells, long before that later maintenance's drain is due.
                return Outcome.wait(self._maintenance_poll_seconds, **watching)
            return self._moved(node, record, min(later), back and kubelet_back, now)
        if not ahead and back and kubelet_back:
            return self._lift_told(
                node,
                record,
                "UncordonedAfterMaintenance",
                f"The scheduled maintenance of {instance} is over and the instance stayed in service: the "
                "cordon set for it is lifted",
            )
        if now > record.global_deadline + MAINTENANCE_WATCH_LIMIT:
            return self._kept(
                node,
                record,
                f"instance {instance} is not back in service with its node Ready ({state}, {in_group}, node "
                f"{'Ready' if node.ready else 'NotReady'}"
                f"{'' if kubelet_back else ', its kubelet not yet back from the reboot: the same boot id'}) "
                f"{MAINTENANCE_WATCH_LIMIT} after its maintenance",
                warning=True,
            )
        # before the window: asleep until it opens; in it or after it, a look every 12 drain polls
        opens = min((event.not_before for event in ahead), default=now)
        delay = max(self._maintenance_poll_seconds, (opens - now).total_seconds())
        return Outcome.wait(delay, **watching)

    def _kubelet_back(
        self,
        node: NodeInfo,
        record: LifecycleRecord,
        extra: dict[str, Any],
        now: datetime,
        *,
        rebooted: bool = False,
    ) -> tuple[bool, dict[str, Any]]:
        """Whether the Ready of a node whose maintenance is over (or whose Spot instance EC2 started again) is its
        kubelet's of now, with the watch's extra to keep. EC2 lists a reboot completed as it carries it out
        ("[Completed]": EC2 API Reference, InstanceStatusEvent), while the instance still boots, and a stop and start
        may come within a minute; the node says Ready as the old kubelet left it until the node monitor's grace is
        over (40 s), and after it until the new kubelet's first status update. Taken for the instance back, the
        cordon was lifted and pods sent to a node whose kubelet was not running. The rebooted kubelet posts the new
        boot's id in the status update that says Ready (the kubelet's MachineInfo setter, pkg/kubelet/nodestatus): a
        boot id other than BOOT_BEFORE (or none told) is its Ready. The same boot id is no reboot (called off, a
        maintenance that reboots nothing, an instance never stopped, one resumed from hibernation) or a boot under
        way: the node's Lease tells them apart, which a live kubelet renews about every 10 s and a booting instance's
        does not. Its renewTime at the first such look is kept (LEASE_AT_OVER); a later look that finds it renewed
        since finds the kubelet of that boot alive (a reboot would have brought another boot id). A Lease it may not
        read (403: an RBAC from before the rule) leaves the Ready alone to tell, as the readiness gate does.

        A renewal alone is not enough: a rebooted kubelet runs its node Lease controller beside its status loop
        (kubelet.go, Kubelet.Run) and may renew the Lease before its first status post, the node still saying the
        old boot's id and Ready; lifted then, pods went to a node whose kubelet had not posted its status (as the
        readiness gate found: launch._posted_since_the_reboot). So the Ready must be posted since that first look
        too: its lastHeartbeatTime changed (HEARTBEAT_AT_OVER), which a kubelet of the same boot that ran all along
        does at its next status report (nodeStatusReportFrequency, 5 minutes at most). A node that tells no
        heartbeat leaves the Lease alone to tell, as before.

        A kubelet of the same boot that runs on (a maintenance called off, an instance resumed from hibernation within
        the node monitor's grace: its node never went Unknown) has nothing changed to post before that next report,
        while a rebooted one posts at its first status sync: a Lease renewed on for SAME_BOOT_AFTER since a look first
        found it renewed, and again since, is that kubelet's (the cordon kept up to 5 minutes on a node in service
        otherwise). Not after a root volume replacement (``rebooted``): it always reboots."""
        before = record.extra.get(BOOT_BEFORE)
        if not before or not node.boot_id or node.boot_id != before:
            return True, extra
        read, renewed = self._lease(node, "is back after the maintenance")
        if not read:
            return True, extra
        stamp = renewed.isoformat() if renewed is not None else NO_LEASE
        beat = node.ready_heartbeat_at.isoformat() if node.ready_heartbeat_at is not None else NO_LEASE
        seen = extra.get(LEASE_AT_OVER)
        if seen is None:
            return False, {**extra, LEASE_AT_OVER: stamp, HEARTBEAT_AT_OVER: beat}
        beat_seen = extra.get(HEARTBEAT_AT_OVER)
        if beat_seen is None:
            # (a watch whose first look kept no heartbeat, from a release before it was kept: this look's is its first)
            return False, {**extra, HEARTBEAT_AT_OVER: beat}
        posted = node.ready_heartbeat_at is None or beat != beat_seen
        renewed_since = renewed is not None and stamp != seen
        if not renewed_since or posted or rebooted:
            return renewed_since and posted, extra
        ran_on, marks = renewed_on_the_same_boot(extra, stamp, now)
        if ran_on:
            log.info(
                "node %s says Ready on the boot from before (%s), its Lease renewed on for %.0f s: its kubelet runs on",
                node.name,
                node.boot_id,
                SAME_BOOT_AFTER.total_seconds(),
            )
        return ran_on, {**extra, **marks}

    def _moved(
        self, node: NodeInfo, record: LifecycleRecord, starts: datetime, back: bool, now: datetime
    ) -> Outcome:
        """EC2 lists nothing of the instance's maintenance by this lifecycle's start, but one at ``starts``, later,
        that no lifecycle on the record is for: the maintenance drained for was moved (a customer's
        ModifyInstanceEventStartTime, of which no AWS Health event tells: EC2 User Guide, "Reschedule scheduled
        events"), or it is one Health has not told of yet. Taken for over, the cordon was lifted and nothing drained
        the node for it: the reboot or stop came to a node full of pods. The record is handed over to a lifecycle
        for that start, due a lead time before it, as intake would have taken it in (see ``_drained_for``). The
        cordon is lifted meanwhile when that is more than now and the instance is back in service with its node
        Ready (not for a move within the lead time: drained again at once, the node takes no pods in between);
        otherwise that lifecycle takes it over (KEPT_ON_NODE) and lifts it once its maintenance is over."""
        due = max(now, starts - self._maintenance_lead)
        extra = dict(record.extra)
        if due > now and back:
            lifted = self._lift_set(node, record)
            if lifted is Claim.CONFLICT:
                raise TransientError(CONFLICT)
            if lifted is not None:
                # (nothing of the node is this lifecycle's to hand over any more)
                extra = {key: value for key, value in extra.items() if key not in (SET_ON_NODE, KEPT_ON_NODE)}
                at = "%Y-%m-%d %H:%M:%SZ"
                message = (
                    f"The scheduled maintenance of {record.instance_id} was moved from "
                    f"{record.global_deadline:{at}} to {starts:{at}}: the cordon set for it is lifted; the node is "
                    f"drained again from {due:{at}}"
                )
                log.info("node %s is uncordoned: %s", node.name, message)
                self._events.on_node(node.name, node.uid, "UncordonedUntilMaintenance", message)
        log.warning(
            "EC2 lists the maintenance of %s at %s, none by %s (moved): its node is drained for it from %s",
            record.instance_id,
            starts,
            record.global_deadline,
            due,
        )
        following = _drained_for(record, starts, due, now)
        return Outcome.next(extra={**extra, SUCCESSOR: following.model_dump(mode="json")})

    def _spot_pace(self, record: LifecycleRecord, now: datetime) -> float:
        """How often the watch after a Spot interruption that stopped its instance looks: as the maintenance watch
        does around the interruption, less often once the instance has been stopped a while (EC2 starts it again
        when capacity comes back, which may take days)."""
        if now - record.global_deadline < SPOT_BRISK_FOR:
            return self._maintenance_poll_seconds
        return max(self._maintenance_poll_seconds, SPOT_IDLE_POLL_SECONDS)

    def _lift_after_restart(self, record: LifecycleRecord, now: datetime) -> Outcome:
        """Lift what this lifecycle set on the node once EC2 has started the instance again after the Spot
        interruption that stopped or hibernated it: the instance runs (seen stopped since, or long enough after the
        interruption that it was stopped and started between two looks), in service in its group if it has one,
        and its node is Ready again (its kubelet back: see _kubelet_back). Until then the cordon stays: the stop may
        still come, and a
        node whose kubelet is not back takes no pods. An instance that goes (terminated: EC2 terminates a stopped
        Spot instance whose request is cancelled or that cannot start; out of its group) keeps it. Only while the
        node is still marked released for this lifecycle, as in the other watches (a later claim removes the mark:
        that cordon is the later lifecycle's, the next interruption's)."""
        node, record = self._marked_node(record)
        if node is None:
            return Outcome.next()
        instance = record.instance_id
        state = self._instances.states([instance]).get(instance)
        in_group = self._autoscaling.lifecycle_state(instance) if record.group else "InService"
        if (
            state is None
            or state in GONE_STATES
            or in_group is None
            or in_group.startswith(NOT_COMING_BACK_STATES)
        ):
            why = f"instance {instance} is not coming back ({state or 'gone'}, {in_group})"
            return self._kept(node, record, why, leaving=True, after=SPOT_AFTER)
        _, watching = _watching(record, SPOT_WATCH, now)
        extra = watching["extra"]
        if state in STOP_STATES and not extra.get(SPOT_DOWN_SEEN):
            extra = {**extra, SPOT_DOWN_SEEN: now.isoformat()}
        started_again = (
            bool(extra.get(SPOT_DOWN_SEEN)) or now >= record.global_deadline + SPOT_RESTART_UNSEEN_AFTER
        )
        kubelet_back = True
        if started_again and state == "running" and in_group == "InService" and node.ready:
            # (a stop and start within the node monitor's grace leaves the node Ready as the kubelet left it before
            # the stop, while the instance boots: see _kubelet_back)
            kubelet_back, extra = self._kubelet_back(node, record, extra, now)
        if started_again and state == "running" and in_group == "InService" and node.ready and kubelet_back:
            return self._lift_told(
                node,
                record,
                "UncordonedAfterSpotInterruption",
                f"EC2 started instance {instance} again after the Spot interruption that stopped it: the cordon "
                "set for it is lifted",
            )
        if now > record.global_deadline + SPOT_WATCH_LIMIT:
            return self._kept(
                node,
                record,
                f"instance {instance} is not running again with its node Ready ({state}, {in_group}, node "
                f"{'Ready' if node.ready else 'NotReady'}"
                f"{'' if kubelet_back else ', its kubelet not yet back: the same boot id'}) "
                f"{SPOT_WATCH_LIMIT} after its Spot interruption",
                warning=True,
                after=SPOT_AFTER,
            )
        return Outcome.wait(self._spot_pace(record, now), extra=extra)

    def _lift_after_root_volume(self, record: LifecycleRecord, now: datetime) -> Outcome:
        """Lift what this lifecycle set on the node once the instance whose root volume was replaced is back in
        service with its node Ready, posted by the rebooted kubelet (a boot id other than BOOT_BEFORE; on the same
        boot id, a Lease renewed since: see _kubelet_back): Auto Scaling puts it in service only after its launch
        hooks let it go
        (Pending:Wait once the volume is replaced), the readiness gate's after its rebooted kubelet ran. Until then
        the cordon stays: the reboot is to come, or under way. An instance that goes (a replacement that failed:
        Auto Scaling terminates it; out of its group) keeps it, as a terminated one's does. Only while the node is
        still marked released for this lifecycle, as in the other watches (a later claim removes the mark)."""
        node, record = self._marked_node(record)
        if node is None:
            return Outcome.next()
        instance = record.instance_id
        _, watching = _watching(record, ROOT_VOLUME_WATCH, now)
        in_group = self._autoscaling.lifecycle_state(instance)
        if in_group is None or in_group.startswith(NOT_COMING_BACK_STATES):
            why = f"instance {instance} is not coming back ({in_group or 'in no group'})"
            return self._kept(node, record, why, leaving=True, after=ROOT_VOLUME_AFTER)
        # Ready from the rebooted kubelet: the node says Ready as the old kubelet left it for the node monitor's
        # grace (40 s) after the reboot, and after it until the new kubelet's first status update. Without a launch
        # hook that waits for the kubelet (or with the readiness gate off) the instance is in service moments after
        # the replacement: uncordoned on that Ready, the node took pods while no kubelet ran there. The new boot's
        # id comes in the same status update as the new kubelet's Ready (the kubelet's MachineInfo setter).
        # (on the same boot id, the Lease tells a kubelet that never stopped: the cleanup read the node only after
        # the reboot, and took the new boot's id for the old one's; see _kubelet_back)
        booted, extra = True, watching["extra"]
        if in_group == "InService" and node.ready:
            booted, extra = self._kubelet_back(node, record, extra, now, rebooted=True)
        if in_group == "InService" and node.ready and booted:
            return self._lift_told(
                node,
                record,
                "UncordonedAfterRootVolumeReplacement",
                f"The root volume of {instance} was replaced and the instance is back in service: the cordon set "
                "for the replacement is lifted",
            )
        if now > record.global_deadline + ROOT_VOLUME_WATCH_LIMIT:
            return self._kept(
                node,
                record,
                f"instance {instance} is not back in service with its node Ready ({in_group}, node "
                f"{'Ready' if node.ready else 'NotReady'}"
                f"{'' if booted else ', its kubelet not yet back from the reboot: the same boot id'}) "
                f"{ROOT_VOLUME_WATCH_LIMIT} after its root volume replacement",
                warning=True,
                after=ROOT_VOLUME_AFTER,
            )
        return Outcome.wait(self._maintenance_poll_seconds, extra=extra)

    def _kept(
        self,
        node: NodeInfo,
        record: LifecycleRecord,
        why: str,
        *,
        warning: bool = False,
        leaving: bool = False,
        after: tuple[str, str] | None = None,
    ) -> Outcome:
        """The watch after a maintenance ends with the cordon kept, and the node tells why. Its instance ``leaving``
        service (terminating, gone, stopped, out of its group), the node stays as the cleanup left it, marked
        released for this lifecycle: the mark keeps its lingering object out of a percent limit's nodes until the
        cloud provider deletes it (see NodeState.released), as the warm pool's watch leaves it for an instance
        terminated from the pool. Otherwise (not back in service long after the maintenance, its instance still in
        its group) its mark goes: nothing on the node is this lifecycle's to lift any more, and a node that stays
        counts as any other."""
        unmarked = None if leaving else self._patched(node, record, lambda: self._cluster.release_node(node))
        if unmarked is Claim.CONFLICT:
            raise TransientError(CONFLICT)  # (the watch's failure: see _watch)
        log.log(logging.WARNING if warning else logging.INFO, "node %s stays cordoned: %s", node.name, why)
        reason, what = after or MAINTENANCE_AFTER
        self._events.on_node(
            node.name,
            node.uid,
            reason,
            f"The node stays cordoned after the {what} of {record.instance_id}: {why}",
            warning=warning,
        )
        return Outcome.next()

    def _release(self, node: NodeInfo, record: LifecycleRecord, now: datetime) -> Claim | None:
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
                return self._release_patch(node, released_for=node.lifecycle)
            return None
        back = self._coming_back(record, now)
        if not (ours or back):
            # Freed already (by the stop of its instance, or by this very cleanup before: a duplicate), and the node
            # is not coming back: it is as this cleanup leaves it, cordoned and marked released for this lifecycle.
            # The mark stays: it keeps the lingering node out of a percent limit's nodes (see below), and a
            # duplicate is harmless (invariant 6).
            return None
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
        if not back:
            # Leaving service: the node stays cordoned, marked released for this lifecycle, which takes its
            # lingering object out of a percent limit's nodes (see NodeState.released) also once the budget's own
            # mark of the slot given back is lost with its ConfigMap
            return self._release_patch(node, released_for=record.id, unlabel=False)
        return self._release_patch(node, uncordon=undo["cordon"], unlabel=undo["lb"])

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

    def _coming_back(self, record: LifecycleRecord, now: datetime) -> bool:
        if not record.transition.has_hook:
            return False  # drained (or cordoned) for a disruption that comes: it stays cordoned
        gone = record.outcome in ("action-expired", "unknown-action") or record.extra.get(SETTLED_ELSEWHERE)
        if not gone:
            return False
        try:
            return self._autoscaling.lifecycle_state(record.instance_id) == "InService"
        except TransientError as error:
            refused = isinstance(error, AccessRefused)
            if not refused and _failing_for(record.extra, RELEASE_FAILING, now) < RELEASE_FAILING_FOR:
                # Throttled (past botocore's retries) or failed: a release that fails, tried again at once (see
                # __call__). Raised as the step's, it went to the engine's backoff (a cleanup: minutes a try) for as
                # long as the throttling lasted, the slot held meanwhile, up to its holder's TTL (invariant 10).
                raise _ReleaseFailed(error) from error
            # Refused (autoscaling:DescribeAutoScalingInstances denied by a service control policy or a permissions
            # boundary), or not answered for RELEASE_FAILING_FOR: whether the instance stayed cannot be told. Taken
            # as going: its node stays cordoned (no pod is sent to an instance that may be terminating) and the slot
            # is given back now, told for an operator to uncordon it if it is in service. Raised, a refusal would
            # hold the slot until its holder expires and fail the message into the dead-letter queue, the node
            # cordoned all the same.
            node = _known(record.node, "node")
            says = "refuses to say" if refused else "does not answer"
            log.error(
                "Auto Scaling %s the state of %s in its group (%s): node %s stays cordoned",
                says,
                record.instance_id,
                error,
                node,
            )
            self._metrics.count("EvictionErrors")  # the alarm: an operator must look
            self._events.on_node(
                node,
                record.node_uid,
                "CordonKeptStateRefused" if refused else "CordonKeptStateUnknown",
                f"The lifecycle action of {record.instance_id} is gone ({record.outcome or 'completed elsewhere'}) "
                f"and Auto Scaling {says} whether the instance stayed in service ({error}): the node stays "
                "cordoned; uncordon it (kubectl uncordon) if the instance is in service",
                warning=True,
            )
            return False


def _boot_before(record: LifecycleRecord, node: NodeInfo) -> str | None:
    """The boot id of the node before its instance's root volume replacement, or the scheduled maintenance it was
    drained for: as the drain last read the node whole (NODE_SEEN: before the completion, so before the reboot; before
    the maintenance's window), when that was this very node object; else as the cleanup reads it, moments after the
    completion. A cleanup run again after a crash, minutes later, may read the rebooted kubelet's: taken for the old
    boot's, the root volume's watch would wait for a boot that came already, the cordon kept until its limit (the
    maintenance's watch then waits for a renewal of the Lease: see Cleanup._kubelet_back)."""
    seen = record.extra.get(NODE_SEEN)
    if isinstance(seen, dict) and seen.get("uid") == node.uid and seen.get("boot_id"):
        return str(seen["boot_id"])
    return node.boot_id


def _may_come(event: ScheduledEvent, record: LifecycleRecord, now: datetime) -> bool:
    """Whether ``event``, which EC2 lists as pending, is maintenance a node drained for the maintenance of
    ``record`` must stay cordoned for: one starting by that one's start (the one drained for, or one before
    it), or already begun, whose window has not ended a margin ago. One that starts later is the instance's next
    maintenance: the lifecycle that follows on the record, or starts it over, drains for it in its time."""
    if event.not_before > max(record.global_deadline, now):
        return False
    return event.not_after is None or now < event.not_after + MAINTENANCE_OVER_AFTER


def _drained_for(record: LifecycleRecord, starts: datetime, due: datetime, now: datetime) -> LifecycleRecord:
    """The lifecycle that follows ``record`` on its record for the maintenance EC2 lists at ``starts`` (see
    ``Cleanup._moved``): its plan from the start, due at ``due``, timed by that start, EC2 listing it
    (MAINTENANCE_LISTED: called off before its drain, it is not drained for). Under a token of its own: the budget
    refuses an ask under the token whose slot was given back, and a node's claim names the lifecycle by it."""
    return LifecycleRecord(
        id=record.id,
        owner=record.owner,
        instance_id=record.instance_id,
        transition=record.transition,
        token=f"{record.token.split(MOVED_TOKEN)[0]}{MOVED_TOKEN}{starts:%Y%m%dT%H%M%SZ}.{record.seq}",
        group=record.group,
        hook=record.hook,
        plan=record.plan,
        step=record.plan[0],
        received_at=now,
        started_at=record.started_at,
        updated_at=now,
        due_at=due,
        heartbeat_timeout=0,
        heartbeat_deadline=starts,
        global_deadline=starts,
        extra={MAINTENANCE_LISTED: True},
    )
