"""The launch readiness gate: a launch is completed once its node has registered and is Ready, its kubelet
running since the launch began."""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta
from typing import Any

from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.engine import MAX_RETRY_BACKOFF_SECONDS, Outcome, ended_with_its_instance
from nodecycle.domain.errors import AccessRefused, TransientError, retry_after_wait
from nodecycle.domain.model import WARM_POOL, LifecycleRecord, Step
from nodecycle.domain.nodes import (
    CLOCK_SKEW,
    SAME_BOOT_AFTER,
    NodeFinder,
    NodeUnreadable,
    renewed_on_the_same_boot,
)
from nodecycle.domain.policy import ReadinessPolicy
from nodecycle.domain.ports.cluster import Cluster, Events, NodeInfo, Refused
from nodecycle.domain.ports.instances import DOWN_STATES, Instances
from nodecycle.domain.ports.lifecycle import Autoscaling
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

POLLS = "polls"  # record.extra key: how often the gate has looked for the node so far
# A node is looked up by its instance's private DNS name, the name EKS nodes register under: one GET, whatever
# the size of the cluster. Listing every node to match provider ids costs the whole cluster, so it is kept for
# clusters that name nodes otherwise: once the node has had time to register (a DNS-named node registers well
# within this), then once in SCAN_EVERY polls, and at the last poll before the gate times out.
SCAN_AFTER = timedelta(minutes=2)
SCAN_EVERY = 6
# A node not Ready yet may be the node of an instance terminated or stopped meanwhile (a scale-in, an operator,
# a Spot interruption): EC2 is asked for its state once in SCAN_EVERY polls, and before the gate times out,
# never while the node is Ready (its kubelet runs, so does its instance).
# A Ready node counts only once its kubelet has renewed its Lease since the launch action started (less CLOCK_SKEW,
# for the clocks of the instance and of Auto Scaling, and an event time cut to the second; none for an instance out
# of a warm pool, its kubelet's last renewal just before it went to sleep: see _renewed_since_first_read). An instance
# taken out of a Stopped warm pool finds its node object still Ready from before the stop for the 40-50 s the node
# controller takes to mark it Unknown, while its kubelet has not run since. The Ready condition's own
# lastHeartbeatTime cannot tell: a live kubelet posts node status only every 5 minutes, but renews its Lease
# about every 10 s (a brand-new node's kubelet creates its Lease as it starts).
# How often a live kubelet renews its node's Lease: a quarter of its 40-s duration (pkg/kubelet: the node lease
# controller's renewIntervalFraction, 0.25, of nodeLeaseDurationSeconds). A Lease renewed last longer ago than this
# (and CLOCK_SKEW) as a launch out of a warm pool began is a kubelet's that was asleep then (see _back_from_its_pool)
KUBELET_RENEW_INTERVAL = timedelta(seconds=10)
# Within this of its launch's start, no Stopped or Hibernated pool's instance has been started by EC2 (pending for
# tens of seconds), booted or resumed, and had its kubelet renew its Lease: a renewal since the start found at a first
# read this soon is a live kubelet's, a Running pool's (see _back_from_its_pool)
BACK_NO_SOONER = KUBELET_RENEW_INTERVAL
# record.extra key: the Lease's renewTime at the gate's first read of it (NO_LEASE for none), kept for a launch
# whose start cannot judge the kubelet's stamps (see _timed_by_intake).
LEASE_SEEN = "lease_seen"
NO_LEASE = "none"
# record.extra key: a launch out of a warm pool whose gate's first read found its kubelet not running (no renewal for a
# renewal interval and CLOCK_SKEW before that read and the launch's start), or found the Lease renewed since the launch
# began already, its kubelet's status not posted since (asleep as the launch began, or not: it cannot tell). See
# _back_from_its_pool
ASLEEP_AT_FIRST_READ = "asleep_at_first_read"
# record.extra key: the node's boot id (status.nodeInfo.bootID) at the gate's first read (NO_BOOT for none), kept for a
# launch whose node outlived its instance's reboot (see _posted_since_the_reboot)
BOOT_SEEN = "boot_seen"
NO_BOOT = "none"
# (A launch told without Origin on a node older than it, see _older_than_its_launch, may be of an instance resumed from
# a Hibernated warm pool: its kubelet of the boot of the gate's first read runs on, see nodes.renewed_on_the_same_boot)
# A Ready node may not take pods yet: it still carries a taint that a controller or an agent lifts once the node is
# set up. Kubernetes' own: the node lifecycle controller's not-ready (the API server's TaintNodesByCondition puts it
# on every new node; the controller lifts it a node monitor period or more after the kubelet posts Ready),
# unreachable and network-unavailable, and the cloud controller manager's uninitialized (until it has set the
# node's provider id, zone and addresses) and shutdown (a node back from a stopped warm pool). Completed then, the
# launch puts the instance in service (an instance refresh drains the next old node) while no pod can go there.
SETUP_TAINTS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/network-unavailable",
        "node.cloudprovider.kubernetes.io/uninitialized",
        "node.cloudprovider.kubernetes.io/shutdown",
    }
)
# And the startup taints of agents, by the name they share: a CNI's (node.cilium.io/agent-not-ready,
# cni.istio.io/not-ready) or a CSI driver's (ebs.csi.aws.com/agent-not-ready, efs.csi.aws.com/...), lifted by the
# agent's node plugin once it runs there. A taint the node keeps for good (a dedicated group's) is the node's
# purpose: it does not hold the gate.
SETUP_TAINT_NAMES = frozenset({"not-ready", "agent-not-ready"})


class ReadinessGate:
    """A launch completes once its node is registered and Ready and its kubelet has run since the launch began
    (bounded by the readiness timeout)."""

    def __init__(
        self,
        *,
        finder: NodeFinder,
        cluster: Cluster,
        instances: Instances,
        autoscaling: Autoscaling,
        dispatcher: Dispatcher,
        policy: ReadinessPolicy,
        metrics: Metrics,
        events: Events,
    ) -> None:
        self._finder = finder
        self._cluster = cluster
        self._instances = instances
        self._autoscaling = autoscaling  # (asked at the gate's timeout only: see _timed_out)
        self._dispatcher = dispatcher
        self._policy = policy
        self._metrics = metrics
        self._events = events

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        deadline = record.gate_deadline or self._deadline(record, now)
        polls = int(record.extra.get(POLLS, 0))
        try:
            # (EC2 refusing the instance's DNS name leaves the node to be found by its instance id or provider id:
            # the launch of a node that joins still completes, rather than every launch waiting out its gate)
            node, extra = self._finder.find(record, scan=self._scan(polls, now, deadline))
            ready = (
                node is not None
                and node.ready
                # (the Lease read first: its first read is the mark a launch the intake timed is judged by)
                and self._kubelet_ran_since(node, record, now, extra)
                and not _still_setting_up(node)
            )
        except AccessRefused as refused:  # (before TransientError, its base: see _refused)
            return self._refused(record, now, deadline, refused, polls)
        except TransientError as error:
            return self._unanswered(record, now, deadline, error)
        except Refused as refused:
            return self._refused(record, now, deadline, refused, polls)
        extra[POLLS] = polls + 1
        if node is not None and ready:
            log.info("node %s is Ready", node.name)
            self._back_from_pool(node, record)
            return Outcome.next(node=node.name, zone=node.zone, outcome="node-ready", extra=extra)
        state = self._state_at_look(record, polls, now, deadline)
        if state in DOWN_STATES:
            return self._down(record, state, extra)
        if now >= deadline:
            outcome = "node-not-ready" if node is not None else "node-never-joined"
            return self._timed_out(record, now, outcome, extra=extra)
        return Outcome.wait(self._next_look(now, deadline), gate_deadline=deadline, extra=extra)

    def _next_look(self, now: datetime, deadline: datetime, wait: float | None = None) -> float:
        """The wait before the next look: a poll (or ``wait``), but no later than the gate's timeout while it is
        still ahead (at least a second, rounded up so that the look falls at or just past it), where the failure
        policy applies. A poll counted from wherever the last look before the timeout fell held a launch whose node
        never joins up to ``DrainPollSeconds`` (300 s) past ``ReadinessTimeoutSeconds``, ten times the shortest
        timeout."""
        wait = float(self._policy.poll_seconds) if wait is None else wait
        left = (deadline - now).total_seconds()
        return wait if left <= 0 else min(wait, max(1.0, float(math.ceil(left))))

    def _deadline(self, record: LifecycleRecord, now: datetime) -> datetime:
        """The gate's timeout, from its first look: the readiness timeout, but not past the point where the
        engine completes the action before its global timeout (less two polls, for the gate's last look to come
        before it). A hook whose own global timeout (100 heartbeat timeouts) ends sooner would otherwise have
        the engine's guard settle the launch of a node that never joins, as an action near its global timeout
        (its alarm: lifecycles nodecycle could not finish), never as the readiness timeout it is. (A first look
        past that point is the guard's to settle, a poll or two on, whatever the gate's deadline.)"""
        policy = self._policy
        timeout = now + policy.timeout
        latest = record.global_deadline - policy.settle_margin - 2 * timedelta(seconds=policy.poll_seconds)
        return min(timeout, latest) if latest > now else timeout

    def _unanswered(
        self, record: LifecycleRecord, now: datetime, deadline: datetime, error: TransientError
    ) -> Outcome:
        """A look that got no answer (the API server throttling or failing, EC2 throttling the instance's
        name) is retried with the engine's backoff as any step's, but not past the gate's timeout: an API server
        that fails for an hour must not hold the launch until its global timeout, whatever the failure policy
        says. The deadline is kept from the first look, or a gate whose every look fails would never reach it."""
        if now >= deadline:
            return self._timed_out(
                record,
                now,
                "readiness-unknown",
                f"its last look unanswered: {error}",
                last_error=str(error)[:500],
            )
        if record.gate_deadline is None:
            # (by the gate's timeout at the latest: a poll longer than the timeout would look again past it)
            wait = self._next_look(
                now, deadline, max(self._policy.poll_seconds, retry_after_wait(error.retry_after))
            )
            log.warning("readiness gate: no answer at its first look, again in %.0f s: %s", wait, error)
            return Outcome.wait(
                wait, gate_deadline=deadline, attempts=record.attempts + 1, last_error=str(error)[:500]
            )
        left = (deadline - now).total_seconds()
        if left <= MAX_RETRY_BACKOFF_SECONDS:
            # The engine's backoff (up to MAX_RETRY_BACKOFF_SECONDS) could put the next look past the gate's
            # timeout: by up to that much past the readiness timeout, and, for a gate that ends two polls before
            # the engine's guard (see _deadline), past the guard's point, whose settlement is then taken for an
            # action near its global timeout (its alarm) rather than the readiness timeout it is. Near the end,
            # the gate looks again at the poll's pace (or the server's Retry-After), its last look at its timeout.
            wait = min(left, max(self._policy.poll_seconds, retry_after_wait(error.retry_after)))
            log.warning(
                "readiness gate: no answer, again in %.0f s (its timeout at %s): %s", wait, deadline, error
            )
            return Outcome.wait(wait, attempts=record.attempts + 1, last_error=str(error)[:500])
        raise error

    def _refused(
        self,
        record: LifecycleRecord,
        now: datetime,
        deadline: datetime,
        refused: Refused | AccessRefused,
        polls: int,
    ) -> Outcome:
        """The API server refuses to show the node (403: a role without get or list on nodes), or AWS refuses the
        instance's name or state (ec2:DescribeInstances denied by a service control policy or a permissions
        boundary). Not an error for the queue to retry and dead-letter, leaving the launch to its global timeout
        (the engine fails a step's message after a few minutes of refused tries, and the sweeper then keeps the
        action alive for up to 48 hours): each look says so, the next comes at the poll's pace (the RBAC or the
        policy may be mended meanwhile), and the gate's timeout settles the launch by the failure policy, its
        alarm telling an operator. Meanwhile EC2 is asked about the instance as at any look that finds no node
        Ready (see DOWN_STATES' use above): an instance gone meanwhile ends the gate as down, not at its timeout as a
        refusal; and what the look learned (the instance's DNS name) is kept, not asked of EC2 at every poll for as
        long as the refusal lasts."""
        why = str(refused)[:500]
        extra = dict(refused.extra) if isinstance(refused, NodeUnreadable) else dict(record.extra)
        extra[POLLS] = polls + 1
        state = self._state_at_look(record, polls, now, deadline)
        if state in DOWN_STATES:
            return self._down(record, state, extra)
        if now >= deadline:
            what = "the instance's read" if isinstance(refused, AccessRefused) else "the node's read"
            return self._timed_out(
                record, now, "readiness-refused", f"{what} refused: {why}", last_error=why, extra=extra
            )
        mend = (
            "mend the drain function's IAM policy, or the service control policy or boundary that denies it"
            if isinstance(refused, AccessRefused)
            else "apply nodecycle's RBAC (nodecycle rbac --group-prefix GROUP | kubectl apply -f -, GROUP the "
            "stack's KubernetesGroup)"
        )
        log.error(
            "readiness gate: refused what it needs to find the node of %s (%s): %s; looking again until %s",
            record.instance_id,
            why,
            mend,
            deadline,
        )
        return Outcome.wait(
            self._next_look(now, deadline), gate_deadline=deadline, last_error=why, extra=extra
        )

    def _back_from_pool(self, node: NodeInfo, record: LifecycleRecord) -> None:
        """A node still marked released for an earlier lifecycle is one whose instance went into a warm pool
        with its cordon kept: that lifecycle's cleanup lifts it once the instance leaves the pool, which it
        has, but looks only every POOL_IDLE_POLL_SECONDS (an instance kept running in the pool for long).
        Woken now, it lifts it as the launch completes rather than up to a minute after the instance is in
        service. (A mark of another stack's lifecycle names no record here: nothing is sent.)"""
        if node.released_for is not None and node.released_for != record.id:
            self._dispatcher.wake_cleanup(node.released_for)

    def _state_at_look(
        self, record: LifecycleRecord, polls: int, now: datetime, deadline: datetime
    ) -> str | None:
        """The instance's state in EC2 at this look of a node not Ready for the gate, whether the API server showed
        the node or refused it (see DOWN_STATES' use above): asked once in SCAN_EVERY polls, and at the gate's
        timeout. None when this look does not ask, or gets no answer: refused (ec2:DescribeInstances denied) or
        unanswered (throttled), the state is not known at this look, which goes on without it. A question that
        voided the look would keep the gate from counting it, and the next look would ask it again, at every poll
        for as long as the refusal lasts, or after the engine's backoff for a throttled one, not at the poll's pace."""
        if not (now >= deadline or (polls + 1) % SCAN_EVERY == 0):
            return None
        try:
            return self._instances.states([record.instance_id]).get(record.instance_id)
        except AccessRefused as refused:  # (before TransientError, its base)
            log.error(
                "the state of instance %s is refused (%s): not known at this look",
                record.instance_id,
                refused,
            )
        except TransientError as error:
            log.warning(
                "the state of instance %s is not answered (%s): not known at this look",
                record.instance_id,
                error,
            )
        return None

    def _down(self, record: LifecycleRecord, state: str, extra: dict[str, object]) -> Outcome:
        """The instance went down while its node was awaited: no node will be Ready for this launch, and no
        readiness timeout is counted (its alarm is for nodes that do not come up). Completed at once with the
        failure policy's result: a terminated instance's action is gone already (Auto Scaling ended it, and the
        completion finds it settled); a stopped instance's is still active, and would otherwise wait out the
        gate for the same result."""
        log.warning(
            "instance %s is %s while its launch waits for its node: completing with %s",
            record.instance_id,
            state,
            self._policy.on_failure,
        )
        return Outcome.goto(
            Step.COMPLETE, result=self._policy.on_failure, outcome="instance-down", extra=extra
        )

    def _timed_out(
        self, record: LifecycleRecord, now: datetime, outcome: str, detail: str = "", **fields: Any
    ) -> Outcome:
        """The gate's timeout: the launch is completed with the failure policy's result. Unless Auto Scaling is
        terminating its instance (or has): it ended the launch action with the termination (a scale-in of an
        instance not yet in service, an operator), while EC2 says running for as long as terminate hooks hold it
        (another tool's, or a drain of ours waiting for a budget slot), so the gate's looks at EC2 never found it
        down. No node is missing for a live launch: the launch ends as ``instance-gone`` (as the engine ends one
        whose heartbeat finds its action so ended, and the address step one that waited), with no readiness
        timeout counted (its alarm pages for nodes that do not come up) and no completion asked of an action Auto
        Scaling no longer has. Asked here only, one DescribeAutoScalingInstances per gate that times out: under a
        launch hook of a long heartbeat timeout (AWS's default: an hour) no heartbeat is due before the gate's
        timeout to find the action gone. Not known (Auto Scaling throttled, refused), the timeout stands."""
        gone = ended_with_its_instance(record, now, self._autoscaling)
        if gone is not None and gone.then is not None:  # (told in the log there)
            extra = fields.get("extra")
            return Outcome.goto(gone.then, **gone.changes, **({} if extra is None else {"extra": extra}))
        why = f"{outcome}, {detail}" if detail else outcome
        log.error("readiness gate timed out (%s): completing with %s", why, self._policy.on_failure)
        self._metrics.count("ReadinessTimeouts")
        return Outcome.goto(Step.COMPLETE, result=self._policy.on_failure, outcome=outcome, **fields)

    def _kubelet_ran_since(
        self, node: NodeInfo, record: LifecycleRecord, now: datetime, extra: dict[str, object]
    ) -> bool:
        """Whether the node's kubelet renewed its Lease since the launch began (see CLOCK_SKEW). A node without
        a Lease waits: a live kubelet creates it again within a renewal. For a launch the intake timed from its
        own clock, see _renewed_since_first_read."""
        try:
            renewed = self._cluster.lease_renewed_at(node.name)
        except Refused as refused:
            # RBAC older than this check: Ready alone, as before it, rather than every launch waiting out its
            # gate (and replaced, under ABANDON); only a stale Ready at a warm-pool return goes unnoticed then
            log.error(
                "the Lease of node %s cannot be read (%s): its Ready condition alone opens the gate; apply this "
                "version's RBAC (nodecycle rbac --group-prefix GROUP | kubectl apply -f -, GROUP the stack's "
                "KubernetesGroup)",
                node.name,
                refused,
            )
            self._events.on_node(
                node.name,
                node.uid,
                "NodeLeaseUnreadable",
                f"The readiness gate of instance {record.instance_id} may not read the node's Lease in "
                f"kube-node-lease ({refused}): it took the Ready condition alone, which a node keeps for a while "
                "after its instance stops. Apply nodecycle's RBAC again (nodecycle rbac --group-prefix GROUP | "
                "kubectl apply -f -, GROUP the stack's KubernetesGroup)",
                warning=True,
            )
            return True
        if record.back_from_root_volume_replacement or _older_than_its_launch(node, record):
            # (the first read's Lease may be the last renewal of the kubelet from before the reboot: never enough; and a
            # renewal since is the rebooted kubelet's, but its Ready is not, until it posted the node's status)
            renewed_since = _renewed_since_first_read(renewed, record, extra, first_read_counts_from=None)
            posted = _posted_since_the_reboot(node, record, extra)
            if posted and renewed_since:
                return True
            # (a root volume replacement always reboots: its kubelet of the same boot id has not posted yet)
            if (
                renewed_since
                and not record.back_from_root_volume_replacement
                and _running_on_the_same_boot(node, renewed, record, now, extra)
            ):
                log.info(
                    "node %s says Ready on the boot it had at the gate's first look (%s), its Lease renewed on for "
                    "%.0f s: its kubelet runs on (an instance resumed from hibernation)",
                    node.name,
                    node.boot_id,
                    SAME_BOOT_AFTER.total_seconds(),
                )
                return True
            if renewed_since:
                log.info(
                    "node %s says Ready and its Lease is renewed, but its kubelet has not posted its status since its "
                    "instance rebooted (boot id %s, heartbeat %s): waiting for it",
                    node.name,
                    node.boot_id,
                    node.ready_heartbeat_at,
                )
                return False
        elif record.origin == WARM_POOL:
            if _back_from_its_pool(node, renewed, record, now, extra, self._instances):
                return True
        elif _timed_by_intake(record):
            # (at the first read, a renewal since both the launch's start and this look counts)
            if _renewed_since_first_read(
                renewed, record, extra, first_read_counts_from=max(record.started_at, now)
            ):
                return True
        elif renewed is not None and renewed >= record.started_at - CLOCK_SKEW:
            return True
        log.info(
            "node %s says Ready, but its kubelet has not renewed its Lease since the launch began at %s (%s): "
            "waiting for it",
            node.name,
            record.started_at,
            f"last renewed at {renewed}" if renewed else "no Lease",
        )
        return False

    def _scan(self, polls: int, now: datetime, deadline: datetime) -> bool:
        """Whether this poll may list every node (see SCAN_AFTER). The time the node has had to register is told
        by the gate's looks so far, each a poll apart at least, not by its deadline less the readiness timeout: a
        deadline cut short by the hook's global timeout (see _deadline) put that before the gate's first look, and
        every such gate listed the whole cluster at its first look and once in SCAN_EVERY polls after it, for a node
        about to register under its DNS name."""
        policy = self._policy
        if now + timedelta(seconds=policy.poll_seconds) >= deadline:
            return True  # the last look before giving up
        looked = timedelta(seconds=polls * policy.poll_seconds)
        return looked >= SCAN_AFTER and polls % SCAN_EVERY == 0


def _older_than_its_launch(node: NodeInfo, record: LifecycleRecord) -> bool:
    """Whether a launch whose event said neither Origin nor Destination (a hook's queue notification need not:
    see model.move_told_by_state) finds a node object registered before it began (less CLOCK_SKEW; the API server's
    clock against Auto Scaling's): the node of an instance back from a root volume replacement, whose launch waits
    in Pending:Wait as a new instance's does, or of a warm pool's instance so told, or another instance's of the same
    name. A new instance registers its node after its launch began. Such a node's Lease may be the last renewal of
    a kubelet gone moments before: it counts only as renewed after the gate's first read, at a renewal's wait at
    most for a kubelet that runs."""
    return (
        record.origin is None
        and record.destination is None
        and node.created_at is not None
        and node.created_at < record.started_at - CLOCK_SKEW
    )


def _back_from_its_pool(
    node: NodeInfo,
    renewed: datetime | None,
    record: LifecycleRecord,
    now: datetime,
    extra: dict[str, object],
    instances: Instances,
) -> bool:
    """Whether the kubelet of an instance out of its warm pool (Origin WarmPool) runs: its Lease renewed since the
    launch began, and, when its kubelet was asleep as the launch began (a Stopped or a Hibernated pool's instance),
    the node's Ready its own. At the first read, a renewal stamped at or after the launch's start counts, with no
    clock allowance (see _renewed_since_first_read). A first read whose renewal is older than the launch's start by
    more than a kubelet's renewal interval and CLOCK_SKEW (KUBELET_RENEW_INTERVAL) is of a kubelet that had
    stopped renewing before the launch began: a renewal since is the booted (or resumed) kubelet's, which renews its
    Lease from the start, while its status loop posts the node's status (the new boot's id, its own Ready) only once
    its first runtime check is done (kubelet.go, Kubelet.Run: the Lease controller started beside a status loop that
    first calls updateRuntimeUp). An instance out of the pool within the node monitor's grace (40 s) finds its node
    still Ready from before the stop: taken with that renewal alone, the launch completed and the instance went in
    service while its node's Ready was the old boot's, its own first post still to come (NotReady while its runtime
    or its network plugin starts). So, as for a node older than its launch told without Origin, that renewal counts
    once the kubelet posted its status since (_posted_since_the_reboot), or has renewed on for SAME_BOOT_AFTER on the
    boot of the first read (a Hibernated pool's, resumed with nothing to post). A Running pool's kubelet renews every
    interval: its first read's renewal is recent, and its next renewal opens the gate as before.

    A first read that finds the Lease renewed since the launch began already (the gate's first look held past the
    instance's boot: an address step asked again 15 s on, a throttled function) cannot tell a Running pool's kubelet
    from a booted one that has not posted its status yet: the Lease keeps only its last renewal. Taken for the
    former, the launch completed on the node's Ready from before the stop. So that renewal too counts only once the
    status is posted, or after SAME_BOOT_AFTER on the first read's boot (ASLEEP_AT_FIRST_READ): a Running pool's
    launch so looked at waits that long, never completed on another boot's Ready. Not a first read within
    BACK_NO_SOONER of the launch's start (the gate's first look as the event, the intake and the address step bring
    it: most launches): no instance out of a Stopped or Hibernated pool renews its Lease that soon, and a Running
    pool's launch, whose kubelet renewed within that interval (one in two at a look 5 s in), waited 40 s for nothing.
    Nor a first read later than that whose node's status EC2 dates after the instance's last start
    (_posted_since_its_last_start): a Running pool's instance, never stopped, whose kubelet posted since its boot.

    The kubelet's last renewal is judged against the later of the launch's start and the first read's time (the drain
    function's clock): a launch the intake timed from its own clock, a minute behind, began a minute early by it, and
    a Lease last renewed before the stop, 20 s before the launch, was taken for a live kubelet's, renewed within an
    interval of that start: the booted kubelet's first renewal opened the gate on the Ready of the boot before the
    stop (see _timed_by_intake). A live kubelet renews within an interval of any read."""
    start = max(record.started_at, now) if _timed_by_intake(record) else record.started_at
    first_read = record.extra.get(LEASE_SEEN) is None
    # (its boot id noted at the first read; a launch the intake timed began early by its clock, by as much as that
    # runs behind: a heartbeat since does not tell the booted kubelet's post from the one before the stop)
    posted = _posted_since_the_reboot(node, record, extra, by_heartbeat=not _timed_by_intake(record))
    renewed_since = _renewed_since_first_read(
        renewed, record, extra, first_read_counts_from=start, allowance=timedelta(0)
    )
    if first_read and (
        renewed is None
        or renewed < max(record.started_at, now) - KUBELET_RENEW_INTERVAL - CLOCK_SKEW
        or (
            renewed_since
            and not posted
            and now - record.started_at > BACK_NO_SOONER
            and not _posted_since_its_last_start(node, record, instances)
        )
    ):
        extra[ASLEEP_AT_FIRST_READ] = True
    # (a record whose first read an earlier version made carries no mark: judged by the launch's start alone)
    asleep = bool(extra.get(ASLEEP_AT_FIRST_READ)) or _asleep_as_it_began(record)
    if not renewed_since:
        return False
    if not asleep or posted or _running_on_the_same_boot(node, renewed, record, now, extra):
        return True
    log.info(
        "node %s says Ready and its Lease is renewed, but its kubelet, asleep in the warm pool as the launch began, "
        "has not posted its status since (boot id %s, heartbeat %s): waiting for it",
        node.name,
        node.boot_id,
        node.ready_heartbeat_at,
    )
    return False


def _posted_since_its_last_start(node: NodeInfo, record: LifecycleRecord, instances: Instances) -> bool:
    """Whether the node's status (its Ready condition's heartbeat) was posted since EC2 last started its instance
    (its LaunchTime, which each start out of the stopped state moves on: see Instances.last_started): the Ready of
    the kubelet of the instance's current boot. Asked of a launch out of a warm pool whose gate's first read, past
    BACK_NO_SOONER, found the Lease renewed since the launch began and no status posted since (see
    _back_from_its_pool): the instance of a Running pool, never stopped, was last started as it went into the pool,
    and its kubelet posted its status since (at its registration, then every 5 minutes with nothing changed: the
    ReadyCondition setter stamps lastHeartbeatTime at each post); a Stopped or Hibernated pool's instance was started
    for this launch, and the heartbeat is its last post before the stop, older than that start by the stop's whole
    time. Without it that first look could not tell the two, and a Running pool's launch waited 40 s on the same
    boot (SAME_BOOT_AFTER) for nothing. The heartbeat must be later than the start by CLOCK_SKEW (a kubelet's clock
    against EC2's): a kubelet posts only once its instance has booted, later than that after EC2's start. EC2 not
    showing the instance up (an answer that lags its start: see Instances.last_started), not answering or refusing,
    or a node with no heartbeat: not known, the launch waits for the status post as before."""
    if node.ready_heartbeat_at is None:
        return False
    try:
        started = instances.last_started(record.instance_id)
    except TransientError as error:  # (AccessRefused too: its subclass)
        log.warning(
            "the last start of instance %s is not answered (%s): its node's Ready is taken for a booted kubelet's "
            "until it posts its status",
            record.instance_id,
            error,
        )
        return False
    return started is not None and node.ready_heartbeat_at >= started + CLOCK_SKEW


def _asleep_as_it_began(record: LifecycleRecord) -> bool:
    """Whether the gate's first read (a look before this one) found the Lease renewed last more than a renewal
    interval before the launch began, or found none: its kubelet was not running then. False at the first read."""
    seen = record.extra.get(LEASE_SEEN)
    if seen is None:
        return False
    if seen == NO_LEASE:
        return True
    return datetime.fromisoformat(str(seen)) < record.started_at - KUBELET_RENEW_INTERVAL - CLOCK_SKEW


def _renewed_since_first_read(
    renewed: datetime | None,
    record: LifecycleRecord,
    extra: dict[str, object],
    *,
    first_read_counts_from: datetime | None,
    allowance: timedelta = CLOCK_SKEW,
) -> bool:
    """Whether the kubelet renewed the Lease since the gate's first read of it: a renewTime changed since that read
    (the kubelet's stamps compared with each other, for equality only: a kubelet whose clock stepped back at boot
    still counts). At the first read itself, a renewal at or after ``first_read_counts_from`` (less ``allowance``)
    counts; None: none does.

    - A launch the intake timed from its own clock, which may run behind (see _timed_by_intake): at the first read
      only a renewal since both that start and this look (by the drain function's clock) counts, so a Lease last
      renewed before a warm-pool stop passes only if both functions' clocks run behind (a live kubelet's last
      renewal may miss it by up to a renewal, which only costs that wait).
    - A launch out of a warm pool (Origin WarmPool): its node is older than the launch, and its Lease was last renewed
      by the kubelet just before the instance stopped or hibernated, which may be within CLOCK_SKEW of the launch's
      start when the instance's stay in the pool was short (a scale-in, then a scale-out seconds after). Taken with
      the allowance, that renewal of a sleeping kubelet opened the gate at its first look: the launch completed
      (CONTINUE) and the instance put in service before its kubelet ran again. At the first read only a renewal
      stamped at or after the start counts (no allowance: a kubelet asleep renews nothing after it); a live kubelet
      whose clock runs behind is seen at its next renewal, a renewal's wait (about 10 s) at most.
    - A launch after a root volume replacement (or on a node older than the launch: see _older_than_its_launch):
      its node is the same object as before the reboot, still Ready for the node monitor's grace (40 s) and its
      Lease renewed by the old kubelet until the reboot began, moments before the launch action started: a
      replacement done within CLOCK_SKEW of the reboot (and an event time cut to the second) passed that Lease as
      renewed since the launch began, and the launch was completed, the instance put back in service and the
      refresh gone on to its next instance, before the rebooted kubelet ran. The reboot comes before the launch
      action, so the gate's first read is of a Lease no live kubelet of the old boot can renew any more: only a
      renewTime changed since that read is the rebooted kubelet's. It costs a renewal's wait (about 10 s) when the
      kubelet was back at that first read."""
    stamp = renewed.isoformat() if renewed is not None else NO_LEASE
    seen = record.extra.get(LEASE_SEEN)
    if seen is None:
        extra[LEASE_SEEN] = stamp
        return (
            first_read_counts_from is not None
            and renewed is not None
            and renewed >= first_read_counts_from - allowance
        )
    return renewed is not None and stamp != seen


def _posted_since_the_reboot(
    node: NodeInfo, record: LifecycleRecord, extra: dict[str, object], *, by_heartbeat: bool = True
) -> bool:
    """Whether the Ready of a node that outlived its instance's reboot (a root volume replacement, a warm pool's
    instance started again: see _older_than_its_launch) is the rebooted kubelet's own: its status posted since. A
    kubelet that starts runs its node Lease controller beside its status loop (kubelet.go, Kubelet.Run), so it may
    renew the Lease before its first status update, which waits for the kubelet's registration and the status
    setters' inputs; meanwhile the node says Ready as the old kubelet left it (a renewed Lease keeps the node
    lifecycle controller from marking it Unknown), and a renewal alone opened the gate: the launch completed, the
    instance put in service and an instance refresh gone on to its next instance, while this one's node did not run.
    The rebooted kubelet's update carries the new boot's id and a new heartbeat in its Ready condition (the kubelet's
    MachineInfo and ReadyCondition setters, pkg/kubelet/nodestatus): a boot id other than at the gate's first read
    (BOOT_SEEN), or a heartbeat since the launch began (the reboot comes before the launch action: the old kubelet
    posted none since; for a kubelet back before the gate's first read). That heartbeat is stamped by the kubelet's
    clock (the ReadyCondition setter's nowFunc, Kubelet.clock.Now) and cut to the second (a metav1.Time), the
    launch's start by Auto Scaling's to the millisecond: compared as the Lease is (less CLOCK_SKEW). Compared as is,
    a status posted as the launch began, by a kubelet whose clock runs a second or more behind (or in the same
    second), read as older than the launch, and the gate waited for the kubelet's next status report (5 minutes),
    past a shorter readiness timeout: the launch completed with the failure policy (ABANDON: a good instance
    replaced). The old kubelet's last heartbeat is older than its instance's reboot, which takes the replacement's
    or the stop's whole time before the launch action begins (minutes on AWS), far more than CLOCK_SKEW. A kubelet
    back even before that is seen at its next status report (5 minutes at most). A node that tells neither (no
    bootID, no heartbeat) leaves the Lease alone to tell, as before. Not ``by_heartbeat``: the boot id alone tells
    (a start the caller cannot date the heartbeat against)."""
    seen = record.extra.get(BOOT_SEEN)
    if seen is None:
        extra[BOOT_SEEN] = node.boot_id or NO_BOOT
    elif node.boot_id and node.boot_id != seen:
        return True
    if node.ready_heartbeat_at is not None:
        return by_heartbeat and node.ready_heartbeat_at >= record.started_at - CLOCK_SKEW
    return node.boot_id is None


def _running_on_the_same_boot(
    node: NodeInfo, renewed: datetime | None, record: LifecycleRecord, now: datetime, extra: dict[str, object]
) -> bool:
    """Whether the kubelet of a node older than its launch, its Lease renewed since the gate's first read but its
    status not posted since, is the kubelet of the boot of that read running on: a Lease renewed SAME_BOOT_AFTER
    since the gate first found it renewed, and again since, the boot id still the first read's. An instance resumed
    from a Hibernated warm pool within the node monitor's grace: its node never went Unknown, so its kubelet has
    nothing changed to post (Kubelet.tryUpdateNodeStatus) until its next report, up to 5 minutes on; waited for,
    the launch outlasted a readiness timeout under that (ReadinessTimeoutSeconds takes 30 s and more) and a good
    instance was abandoned and replaced. The Ready left from before the hibernation is never taken alone: an instance
    still asleep renews no Lease. A node that tells no boot id does not count (its status post tells)."""
    if not node.boot_id or node.boot_id != record.extra.get(BOOT_SEEN):
        return False
    stamp = renewed.isoformat() if renewed is not None else NO_LEASE
    ran_on, marks = renewed_on_the_same_boot(record.extra, stamp, now)
    extra.update(marks)
    return renewed is not None and ran_on


def _timed_by_intake(record: LifecycleRecord) -> bool:
    """Whether the intake timed the launch from its own clock rather than by Auto Scaling's event time: it does
    so for an event dated after its now (domain/intake.py), which an intake whose clock runs behind finds of
    every event it takes in before its clock catches up. That start is then early by as much as the intake's
    clock is behind, and a Lease renewed before a warm-pool stop, though dead, would pass for renewed since.
    (Otherwise the receipt, on the intake's clock to the microsecond, equals the event's time only by chance,
    which costs a launch a renewal's wait at most.)"""
    return record.started_at == record.received_at


def _still_setting_up(node: NodeInfo) -> bool:
    """Whether the node, Ready, still carries a taint lifted once it is set up (see SETUP_TAINTS): the gate waits."""
    setting_up = [
        key
        for key in dict.fromkeys(node.taints)  # (a key once, whatever its effects: not-ready is both)
        if key in SETUP_TAINTS or key.rpartition("/")[2] in SETUP_TAINT_NAMES
    ]
    if setting_up:
        log.info(
            "node %s says Ready, but is still tainted %s: waiting for it", node.name, ", ".join(setting_up)
        )
    return bool(setting_up)
