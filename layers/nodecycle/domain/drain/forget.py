"""An instance gone without a hook: its node's annotations and its budget entries are freed."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.drain.common import _at_once, _backing_off
from nodecycle.domain.engine import Outcome
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import (
    LifecycleRecord,
)
from nodecycle.domain.nodes import NodeFinder
from nodecycle.domain.policy import DrainPolicy
from nodecycle.domain.ports.budget import Slots
from nodecycle.domain.ports.cluster import Claim, Cluster, Refused
from nodecycle.domain.ports.instances import Instances, up

log = logging.getLogger(__name__)

# record.extra key: since when the release of the node fails (409, 5xx, a webhook that is down, its reads failing)
FORGET_FAILING = "forget_failing"
# record.extra keys: since when EC2 does not answer for the instance's state (throttled, 5xx), and since when the
# API server fails the budget's ConfigMap at the slot's forgetting (5xx, throttling, a conflict storm)
FORGET_STATE_UNKNOWN = "forget_state_unknown"
FORGET_BUDGET_FAILING = "forget_budget_failing"


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
        policy: DrainPolicy,
    ) -> None:
        self._finder = finder
        self._cluster = cluster
        self._slots = slots
        self._dispatcher = dispatcher
        self._instances = instances
        # (asked again within the drain's cadence while EC2 or the budget does not answer, up to its timeout)
        self._poll = policy.poll_seconds
        self._retry = max(policy.poll_seconds, policy.budget_retry_seconds)
        self._unknown_for = policy.timeout

    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome:
        # Intake confirmed the instance down, but this step may run much later (a redelivery, a resume, a
        # dead-letter redrive): an instance up again since (back from its warm pool) may be in a newer
        # lifecycle, whose slot and annotations are not this one's to free
        try:
            state = self._instances.states([record.instance_id]).get(record.instance_id)
        except AccessRefused as refused:
            # (ec2:DescribeInstances denied by a service control policy or a permissions boundary): whether the
            # instance is up again cannot be told, so nothing is freed, as for one up again. What this step frees
            # sooner is freed all the same by the drain's own cleanup (its slot, its annotations), its slot's
            # expiry, or the sweeper; raised, the refusal would fail the message into the dead-letter queue after
            # the engine's refused tries, with nothing freed either.
            log.error(
                "the state of instance %s is refused (%s): nothing of it is freed; its drain's cleanup and the "
                "sweeper free it",
                record.instance_id,
                refused,
            )
            return Outcome.next(outcome="instance-state-refused")
        except TransientError as error:
            later = self._again_later(record, record.extra, FORGET_STATE_UNKNOWN, error, now)
            if later is not None:
                return later
            log.error(
                "the state of instance %s is not known (%s, at every try since %s): nothing of it is freed; its "
                "drain's cleanup and the sweeper free it",
                record.instance_id,
                error,
                record.extra.get(FORGET_STATE_UNKNOWN, now.isoformat()),
            )
            return Outcome.next(outcome="instance-state-unknown")
        if up(state):
            log.info(
                "instance %s is %s again since it went down at %s: nothing of it is freed (a late message)",
                record.instance_id,
                state,
                record.started_at,
            )
            return Outcome.next(outcome="instance-up-again")
        found: dict[str, Any] = {}
        try:
            node, extra = self._finder.find(record)
            found["extra"] = extra
            if node is not None:
                found |= {"node": node.name, "node_uid": node.uid, "zone": node.zone}
                if (
                    node.owner == record.owner
                    and self._cluster.release_node(node, released_for=node.lifecycle) is Claim.CONFLICT
                ):
                    raise TransientError(
                        "the node changed between its read and the PATCH (HTTP 409 Conflict)"
                    )
        except Refused as refusal:
            # The API server will not show the node or release it (RBAC edited for a while, a webhook that guards
            # it): its annotations stay for the sweeper, and the instance's slot and waiting place, which need no
            # node (instance ids are never reused), are still freed, not held until the message dead-letters
            log.error("the node of %s is not released: %s; its annotations stay", record.instance_id, refusal)
        except TransientError as error:
            # It conflicts (something else writes the node), or the API server fails the read or the PATCH (5xx, a
            # webhook that is down, throttling): read and released again at once for RELEASE_FAILING_FOR, as the
            # cleanup's release is. Not for ever: a conflict was tried every second for as long as a storm lasted,
            # a failure raised into the engine's backoff (minutes a try), and the slot, which needs no node, held
            # all the while. Then the annotations are left to the sweeper, as a refused release's are.
            extra = {**record.extra, **found.get("extra", {})}
            again = _at_once(extra, FORGET_FAILING, now, error.retry_after)
            if again is not None:
                return Outcome.wait(again.delay, **{**found, **again.changes})
            log.error(
                "the node of %s is not released (%s, at every try since %s); its annotations stay",
                record.instance_id,
                error,
                extra[FORGET_FAILING],
            )
        try:
            woken = self._slots.forget(record.owner, record.instance_id)
        except TransientError as error:
            # (the node's release, done or given up, is not done again: a node released is this owner's no more)
            extra = {**record.extra, **found.get("extra", {})}
            later = self._again_later(record, extra, FORGET_BUDGET_FAILING, error, now)
            if later is not None:
                return Outcome.wait(later.delay, **{**found, **later.changes})
            log.error(
                "the budget slot of %s is not freed (%s, at every try since %s): its expiry and the sweeper free it",
                record.instance_id,
                error,
                extra.get(FORGET_BUDGET_FAILING, now.isoformat()),
            )
            return Outcome.next(outcome="budget-unavailable", **found)
        self._dispatcher.wake_each(woken)
        log.info("instance %s went without a hook: its slot and annotations are freed", record.instance_id)
        return Outcome.next(outcome="instance-gone-without-hook", **found)

    def _again_later(
        self, record: LifecycleRecord, extra: dict[str, Any], key: str, error: TransientError, now: datetime
    ) -> Outcome | None:
        """What this step needs fails (EC2 does not answer for the instance's state: throttled, the account's
        DescribeInstances shared with other tools; the API server fails the budget's ConfigMap: an etcd that times
        out): asked again later, noted since when in ``key`` of ``extra``; None once it has failed for the drain
        timeout. Raised, the failure went to the engine's backoff, which for this step (no draining step) doubles up
        to 3 minutes a try: the slot it frees, which others wait for, held all the while and for minutes after the
        service answered again. Asked again a poll later, then backing off with jitter up to the waiters' retry
        (many instances stopped together, in a scale-in or a Spot reclaim, do not ask a failing service in step),
        no sooner than a Retry-After; what it frees is freed as soon as it answers. Past the drain timeout the step
        ends: the drain's own cleanup, its slot's expiry and the sweeper free what it would have."""
        noted = extra.get(key)
        since = now if noted is None else datetime.fromisoformat(str(noted))
        deadline = since + self._unknown_for
        if now >= deadline:
            return None
        log.warning("instance %s: %s; asking again", record.instance_id, error)
        # (failing for less than a poll, the backoff is a poll: asked again a poll later)
        wait = _backing_off(
            since, now, floor=self._poll, cap=self._retry, retry_after=error.retry_after, deadline=deadline
        )
        return Outcome.wait(wait, extra={**extra, key: since.isoformat()})
