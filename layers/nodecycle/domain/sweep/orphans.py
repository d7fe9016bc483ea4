"""The sweep of orphaned actions: lifecycle actions of this stack's hooks that no record tells of.

Intake is the only writer of a new lifecycle. When it fails for all its retries (DynamoDB or SQS down for
minutes, a key or role denied until someone fixes it) its event goes to the intake dead-letter queue, and
when EventBridge never delivers one there is not even that: either way nothing would heartbeat or complete the
action, and at the hook's heartbeat timeout Auto Scaling applies its default result (CONTINUE: the node
terminates undrained; a launch: no address, no readiness gate). The other repairs of the sweep see only
lifecycles that have a record.

So each sweep lists the instances hooks hold in this stack's groups (one DescribeAutoScalingGroups, in pages,
for all of them) and looks for those with no lifecycle of their transition whose action is open. Each one's
action under each of this stack's hooks is probed with a heartbeat by instance id (no API tells an action's
token): Auto Scaling accepts it only while that hook holds the instance, and it keeps the action alive until
the next sweep. An action found so again by a sweep at least ``adopt_after`` later (intake had its time: its retries,
a late delivery) is adopted: intake's own path starts its lifecycle, under a token of its own that a late
event of the action finds (``Intake.accept``), so redriving the dead letter starts no second lifecycle.

The first sightings live in the sweeper's container (sweeps run one at a time): a cold start forgets them,
which costs one more heartbeat and one more interval before the adoption, never an adoption too early.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from nodecycle.domain.catalog import LifecycleHooks, ManagedGroups
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import LifecycleRecord, Transition
from nodecycle.domain.ports.lifecycle import Autoscaling, WaitingInstance
from nodecycle.domain.ports.runtime import Metrics
from nodecycle.domain.sweep.sweeper import Counts, SweepFailed

log = logging.getLogger(__name__)


class OrphanedActions:
    def __init__(
        self,
        *,
        groups: ManagedGroups,
        hooks: LifecycleHooks,
        autoscaling: Autoscaling,
        intake: Intake,
        metrics: Metrics,
        adopt_after: timedelta,
    ) -> None:
        self._groups = groups
        self._hooks = hooks
        self._autoscaling = autoscaling
        self._intake = intake
        self._metrics = metrics
        self._adopt_after = adopt_after
        # (instance, hook) -> its first sighting, and the listing before it that did not show it (if known)
        self._seen: dict[tuple[str, str], tuple[datetime, datetime | None]] = {}
        self._last_listed: datetime | None = None  # when the last sweep listed the held instances

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime) -> Counts:
        counts = {"LifecyclesOrphaned": 0, "LifecyclesAdopted": 0, "AdoptionsFailed": 0}
        # (not a lifecycle whose action is over that still watches its node: into a warm pool, for weeks; the
        # instance's next action under the hook is another one)
        known = {(r.instance_id, r.transition) for r in open_records if r.action_open}
        listed_before, self._last_listed = self._last_listed, now
        seen: dict[tuple[str, str], tuple[datetime, datetime | None]] = {}
        for waiting in self._groups.waiting_instances():
            if (waiting.instance_id, waiting.transition) in known:
                continue
            try:
                for hook in self._our_hooks(waiting.group, waiting.transition):
                    key = (waiting.instance_id, hook)
                    if not self._held(waiting, hook):
                        continue  # this hook's action is over (ours, completed) or another hook holds it
                    counts["LifecyclesOrphaned"] += 1
                    first, before = seen[key] = self._seen.get(key, (now, listed_before))
                    if now - first < self._adopt_after:
                        log.warning(
                            "%s is held by hook %s with no lifecycle record: kept alive, adopted unless its "
                            "event comes within %s",
                            waiting.instance_id,
                            hook,
                            self._adopt_after,
                        )
                        continue
                    # It started after the last listing that did not show it; a cold container does not know
                    # when that was: about a sweep interval before the first sighting. (Its global timeout is
                    # reckoned from here: 100 heartbeat timeouts or 48 hours, so a guess errs by little.)
                    since = before if before is not None else first - 2 * self._adopt_after
                    outcome = self._intake.adopt(waiting, hook, since)
                    if outcome is not IntakeOutcome.ACCEPTED:
                        continue  # (intake said why: a lifecycle of the action was written first)
                    log.warning(
                        "adopted the %s action of %s under hook %s, held with no lifecycle record since %s: "
                        "its event was lost or dead-lettered",
                        waiting.transition.short,
                        waiting.instance_id,
                        hook,
                        first,
                    )
                    counts["LifecyclesAdopted"] += 1
            except Exception:  # one instance's failure must not stop the others
                log.exception("could not adopt the action of %s", waiting.instance_id)
                counts["AdoptionsFailed"] += 1
        self._seen = seen  # what is no longer held is forgotten (and what was adopted, once its record lists)
        self._metrics.count("LifecyclesOrphaned", counts["LifecyclesOrphaned"])
        self._metrics.count("LifecyclesAdopted", counts["LifecyclesAdopted"])
        if counts["AdoptionsFailed"]:
            raise SweepFailed(f"{counts['AdoptionsFailed']} orphaned actions could not be adopted")
        return counts

    def _our_hooks(self, group: str, transition: Transition) -> list[str]:
        """This stack's hooks of ``transition`` on ``group`` (read once per group and ttl)."""
        return [
            name
            for name, hook in self._hooks.of(group).items()
            if hook.transition is transition and self._groups.takes_hook(name)
        ]

    def _held(self, waiting: WaitingInstance, hook: str) -> bool:
        """Whether ``hook`` holds an action of the instance: a heartbeat by instance id is accepted only then,
        and keeps it alive until the next sweep."""
        held = self._autoscaling.heartbeat(waiting.action(hook))
        if held:
            self._metrics.count("Heartbeats")
        return held
