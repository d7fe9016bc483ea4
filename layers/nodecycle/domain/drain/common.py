"""What the drain's steps share: record.extra keys and timings, the slot request and its precedence, the
wake-ups, the node of the instance."""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from pydantic import ValidationError

from nodecycle.domain.budget import SlotRequest
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import AccessRefused, TransientError, retry_after_wait
from nodecycle.domain.flow import settle_step
from nodecycle.domain.model import (
    ADOPTED,
    LifecycleRecord,
    Step,
    Transition,
)
from nodecycle.domain.nodes import PRIVATE_DNS
from nodecycle.domain.policy import DrainPolicy
from nodecycle.domain.ports.cluster import Cluster, Events, NodeInfo
from nodecycle.domain.ports.instances import Instances, up
from nodecycle.domain.ports.runtime import Metrics

log = logging.getLogger(__name__)

# A pod still there this long after its deletion's deadline (deletionTimestamp: request + grace) will not go by
# itself (a finalizer nobody removes, a kubelet that is gone): kubectl drain's --skip-wait-for-delete-timeout.
STUCK_AFTER = timedelta(seconds=60)
# A Spot instance's drain ends this long before the interruption: a pod's grace never reaches past it
SPOT_MARGIN = timedelta(seconds=10)
# In a drain's tail (see _tail): its looks at what it waits for come up to a second past where they are due (its
# deadline, the end of the force's wait: rounded up to whole seconds, so that they fall at or past it), each
# delivered and run a moment later. Without it a drain whose deadline was capped, its forced deletes refused or
# its pods unlisted, ended a second or two after the point where the engine's guard completes the action: the
# guard took it (global-timeout-near, its alarm paged) every time.
LOOK_SLACK = timedelta(seconds=5)
ADOPT_FROM = (
    "adopt_from"  # record.extra key: the owner whose stale claim on the node this lifecycle takes over
)
# record.extra key: the node as a step of the drain last read it whole (its slot's ask, the eviction's polls). The
# next read of it (a retry of the ask, the cordon, the next poll, the cleanup) reads its metadata only, and the
# whole node only when its version moved since.
NODE_SEEN = "node_seen"
# Failures of a release of the node that go on this long are no blip (a conflict storm: something rewrites the node
# at every turn; a webhook whose pods are gone): the release is then refused as a webhook's refusal is, and the slot
# given back (see Cleanup.__call__, ForgetNode)
RELEASE_FAILING_FOR = timedelta(seconds=10)


def _known[T](value: T | None, what: str) -> T:
    """A record field an earlier step of the plan has set."""
    if value is None:
        raise RuntimeError(f"lifecycle record has no {what}: the plan's steps ran out of order")
    return value


def _named(record: LifecycleRecord) -> str:
    """The name a drain's events on its node go by: the node's, once a step found it; before that (the reads that
    would find it fail) the instance's private DNS name, its node's name on EKS unless overridden, else the
    instance id. An Event names its object by name only: one about a node never found is still listed by
    ``kubectl get events``, and its message names the instance."""
    dns = record.extra.get(PRIVATE_DNS)
    return record.node or (dns if isinstance(dns, str) and dns else record.instance_id)


def _node_as_seen(cluster: Cluster, record: LifecycleRecord, node: str) -> tuple[NodeInfo | None, bool]:
    """The node (None: gone), and whether it was read whole. Its metadata is read first when a step has read it
    whole before (NODE_SEEN): a node whose uid and version are those of that read is that node unchanged (its
    instance, its cordon, its readiness, its annotations), and its spec and status, most of its bytes, need not be
    read again."""
    seen = record.extra.get(NODE_SEEN)
    if isinstance(seen, dict):
        version = cluster.node_version(node)
        if version is None:
            return None, False
        if version == (seen.get("uid"), seen.get("resource_version")):
            try:
                return NodeInfo.model_validate(seen), False
            except ValidationError:  # (kept by an older release, or unreadable: read whole)
                log.warning("node %s as last read is unreadable in the record: reading it whole", node)
    return cluster.get_node(node), True


def _seen(extra: Mapping[str, Any], node: NodeInfo) -> dict[str, Any]:
    """``extra`` with ``node`` as last read whole (NODE_SEEN)."""
    return {**extra, NODE_SEEN: node.model_dump(mode="json")}


def _unseen(extra: Mapping[str, Any]) -> dict[str, Any]:
    """``extra`` without the node as last read whole: a step patched it (its version moved), so the next read is
    whole."""
    return {key: value for key, value in extra.items() if key != NODE_SEEN}


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


def _until_deadline(wait: float, deadline: datetime, now: datetime) -> float:
    """``wait`` (a poll's, a refused call's), but no later than ``deadline`` while it is still ahead (at least a
    second, rounded up so that the next look falls at or just past it): there the drain's timeout policy acts. A
    poll interval counted from wherever the last poll before it fell (up to ``DrainPollSeconds``, 300 s) acted
    that much past it, the slot held that much longer than invariant 10 allows (its timeout + force grace + a
    margin), and with the deadline capped near the global timeout (``_deadline_cap``, whose tail counts no poll)
    the engine's guard completed the action before the policy applied (invariant 2)."""
    left = (deadline - now).total_seconds()
    if left <= 0:
        return wait
    return min(wait, max(1.0, float(math.ceil(left))))


def _tail(policy: DrainPolicy) -> timedelta:
    """What a drain needs after its timeout: the force policy's grace, a stuck pod's margin (the force's wait
    for its deletes: FORCED_POD_SLACK, as long), the slack of the looks at its deadline and at that wait's end
    (LOOK_SLACK), the load balancer delay waited once the node is empty, and the margin before the action's
    global timeout at which the engine completes it whatever happens."""
    return (
        timedelta(seconds=policy.force_grace)
        + STUCK_AFTER
        + LOOK_SLACK
        + policy.lb_deregistration_delay
        + policy.settle_margin
    )


def _full_drain(policy: DrainPolicy) -> timedelta:
    """The longest a whole drain takes, from its cordon to the completion of its action."""
    return policy.timeout + _tail(policy)


def _maintenance_tail(policy: DrainPolicy) -> timedelta:
    """What a maintenance's drain needs after its timeout: the forced pods' grace, the looks at the force's
    deadline and at that grace's end, and the load balancer delay, all before the maintenance starts. No action is
    completed for it, so neither the engine's settle margin nor a stuck pod's wait (the maintenance takes the
    instance whatever is left on it) is kept before its start."""
    return timedelta(seconds=policy.force_grace) + LOOK_SLACK + policy.lb_deregistration_delay


def _deadline_cap(record: LifecycleRecord, policy: DrainPolicy) -> datetime:
    """The latest a drain's deadline may be: where its timeout policy still has time to act before the
    action's global timeout (a Spot interruption's two minutes end sooner). A maintenance's global deadline is its
    start, and nothing is completed there: capped as a hook's (its tail over eight minutes with the defaults), a
    drain MaintenanceLeadMinutes=1 ahead had its deadline past before it began, and its timeout policy deleted what
    the PodDisruptionBudgets held a second into it, a minute before the start."""
    if record.transition is Transition.SPOT_INTERRUPTION:
        return record.global_deadline - SPOT_MARGIN
    return record.global_deadline - _tail_of(record, policy)


def _tail_of(record: LifecycleRecord, policy: DrainPolicy) -> timedelta:
    """What the drain of ``record`` needs after its timeout, before its global deadline."""
    if record.transition is Transition.SCHEDULED_CHANGE:
        return _maintenance_tail(policy)
    return _tail(policy)


def _precedence(record: LifecycleRecord, now: datetime, policy: DrainPolicy) -> dict[str, Any]:
    """A slot request's precedence near the action's global timeout. Near it a node goes before the others;
    nearer still it cannot wait any longer: it goes either way then, and a drain that respects
    PodDisruptionBudgets beats none, so it takes a slot even without room (a forced holder, which the others
    count). A Spot interruption is not the budget's to refuse: the capacity goes either way. A rebalance
    recommendation has no deadline (its record's is a horizon): it waits in line however long, and is never
    forced past the budget."""
    if record.transition is Transition.REBALANCE:
        return {"urgent_at": None, "force": False}
    # (a maintenance's whole drain, by its own tail: measured by a hook's, a maintenance 15 to 23 minutes ahead, with
    # the defaults, took a slot past the budget where its drain still fitted after a wait in line)
    full_drain = policy.timeout + _tail_of(record, policy)
    return {
        "urgent_at": record.global_deadline - 2 * full_drain,
        "force": record.transition is Transition.SPOT_INTERRUPTION
        or now >= record.global_deadline - full_drain,
    }


def _of_instance(node: NodeInfo, record: LifecycleRecord) -> bool:
    """Whether the node is the record's instance's. Node names are reused (a new instance given the private IP
    of one gone gets its DNS name, and its node the name of the node gone with it); provider ids are not. A
    node without one yet goes by its name, as the finder takes it."""
    return node.instance_id in (None, record.instance_id)


def _for_this_action(node: NodeInfo, record: LifecycleRecord) -> bool:
    """Whether the claim of ``node`` (another stack's) is for this very lifecycle action, which both stacks took (a
    group both manage, by mistake): its lifecycle is this record's; or, when either was adopted (its event lost: no
    token, the action named by instance id), one of the same instance and hook transition."""
    if node.lifecycle == record.id:
        return True
    progress = node.progress()
    same = (progress.get("instance"), progress.get("transition")) == (
        record.instance_id,
        record.transition.short,
    )
    if not (same and record.transition.has_hook):
        return False
    return not record.token_known or str(progress.get("token", "")).startswith(ADOPTED)


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


def _instance_down(instances: Instances, record: LifecycleRecord) -> str | None:
    """The state of the record's instance when EC2 says it is down (stopping, stopped, shutting-down, terminated);
    None while it is up, when EC2 does not list it, and when EC2 does not answer: throttled, or refused
    (ec2:DescribeInstances denied by a service control policy or a permissions boundary). A drain asks only to end
    sooner (a stopped instance's kubelet is gone, and its pods would stay Terminating); unanswered, it goes on as
    for an instance that runs, its pods asked to leave and waited for within its timeout policy, rather than its
    poll failed at every try: into the dead-letter queue once the engine's refused tries are over, or past the
    drain's timeout while throttled. Unlisted likewise: EC2 lists a terminated instance for about an hour, so one
    it does not list while its lifecycle drains it is one its eventually consistent reads do not show yet (launched
    moments ago: an instance terminated as soon as its node registered), and taken for gone the drain was skipped,
    its action completed under running pods and its slot given back."""
    try:
        state = instances.states([record.instance_id]).get(record.instance_id)
    except TransientError as error:
        level = logging.ERROR if isinstance(error, AccessRefused) else logging.WARNING
        log.log(
            level,
            "the state of instance %s is not known (%s): drained as one that runs",
            record.instance_id,
            error,
        )
        return None
    if state is None:
        log.info("EC2 does not list instance %s (yet): drained as one that runs", record.instance_id)
        return None
    return None if up(state) else state


def _set_on_node(noted: Mapping[str, object]) -> dict[str, bool]:
    """What a claim noted it set on the node (SET_ON_NODE); a claim from before that was noted set both."""
    return {"cordon": noted.get("cordon") is not False, "lb": noted.get("lb") is not False}


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
    # (asked again at the deadline at the latest, where the drain is settled: see _until_deadline)
    wait = _until_deadline(policy.poll_seconds, deadline, now)
    return Outcome.wait(wait, **{**found, "extra": {**extra, marker: since}})


def _backing_off(
    since: datetime,
    now: datetime,
    *,
    floor: float,
    cap: float,
    retry_after: float | None,
    deadline: datetime,
) -> float:
    """The wait before a failing call (failing since ``since``) is tried again: up to as long as it has failed so
    far (so each wait nearly doubles the time failed), from ``floor`` up to ``cap``, jittered down by up to a
    quarter, no sooner than a Retry-After, never past ``deadline`` (where the step's timeout acts). Hundreds of
    waiters asking a failing API server every poll add to the load it fails under, all at the same moments when
    they began failing together; backing off, and out of step, they leave it room to come back."""
    failed = (now - since).total_seconds()
    base = min(cap, max(floor, failed))
    wait = max(floor, base * random.uniform(0.75, 1.0))
    wait = max(wait, retry_after_wait(retry_after))
    return max(1.0, min(wait, (deadline - now).total_seconds()))


def _cause(record: LifecycleRecord) -> str:
    """What the drain (or the cordon) of ``record``'s node is for, as its events say it."""
    if record.transition is Transition.REBALANCE:
        return f"the rebalance recommendation of {record.instance_id}"
    if record.transition is Transition.SCHEDULED_CHANGE:
        return f"the scheduled maintenance of {record.instance_id}"
    return f"the termination of {record.instance_id}"


def _ended(record: LifecycleRecord) -> str:
    """What the end of a drain that timed out before it drained does, as its DrainTimeout event says it: a hook's
    action is completed; a drain without one (a maintenance's, a Spot interruption's) completes nothing."""
    if Step.COMPLETE in record.plan:
        return f"the lifecycle action of {record.instance_id} is completed"
    return f"nothing more is done for {_cause(record)}"


def _then_undrained(record: LifecycleRecord) -> str:
    """What comes at the end of a wait that keeps a drain from its start, as the told event says it."""
    return (
        "then its action is completed undrained"
        if Step.COMPLETE in record.plan
        else "then the drain times out"
    )


def _waiters_backoff(
    policy: DrainPolicy, since: datetime, now: datetime, retry_after: float | None, deadline: datetime
) -> float:
    """The wait before what waits outside a drain (a slot's ask whose node is unread, a cordon without a slot the
    API server fails or refuses) asks again: from a poll up to the waiters' cadence (BudgetRetrySeconds), backing
    off with jitter (see :func:`_backing_off`). No budget bounds how many such asks there are."""
    return _backing_off(
        since,
        now,
        floor=policy.poll_seconds,
        cap=max(policy.poll_seconds, policy.budget_retry_seconds),
        retry_after=retry_after,
        deadline=deadline,
    )


def _failing_for(extra: dict[str, Any], key: str, now: datetime) -> timedelta:
    """How long what ``key`` of ``extra`` notes has been failing (nothing noted: not yet)."""
    since = extra.get(key)
    return timedelta(0) if since is None else now - datetime.fromisoformat(str(since))


def _at_once(extra: dict[str, Any], key: str, now: datetime, retry_after: float | None) -> Outcome | None:
    """A failure of the release or of a watch after it, tried again at once (no sooner than a Retry-After) while
    it has failed for less than RELEASE_FAILING_FOR: the wait, with since when it fails noted in ``key`` of
    ``extra``; None once it has failed longer."""
    since = extra.get(key)
    if _failing_for(extra, key, now) >= RELEASE_FAILING_FOR:
        return None
    return Outcome.wait(
        max(1.0, retry_after_wait(retry_after)), extra={**extra, key: since or now.isoformat()}
    )
