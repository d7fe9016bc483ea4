"""The sweep of orphaned actions: lifecycle actions of this stack's hooks that no record tells of.

Intake is the only writer of a new lifecycle. When it fails for all its retries (DynamoDB or SQS down for
minutes, a key or role denied until someone fixes it) its event goes to the intake dead-letter queue, and
when EventBridge never delivers one there is not even that: either way nothing would heartbeat or complete the
action, and at the hook's heartbeat timeout Auto Scaling applies its default result (CONTINUE: the node
terminates undrained; a launch: no address, no readiness gate). The other repairs of the sweep see only
lifecycles that have a record.

So each sweep lists the instances hooks hold in this stack's groups (one DescribeAutoScalingGroups, in pages,
for all of them) and looks for those with no lifecycle of their transition and hook whose action is open. Each one's
action under each of this stack's hooks is probed with a heartbeat by instance id (no API tells an action's
token): Auto Scaling accepts it only while that hook holds the instance, and it keeps the action alive until
the next sweep. An action found so again by a sweep at least ``adopt_after`` later (intake had its time: its retries,
a late delivery) is adopted: intake's own path starts its lifecycle, under a token of its own that a late
event of the action finds (``Intake.accept``), so redriving the dead letter starts no second lifecycle.

Two parts of the sweep: the keep-alive (listing and heartbeats) comes first of all the sweep's parts, the
adoptions after the lifecycles' repair (see :mod:`.sweeper`). While DynamoDB will not list the open lifecycles,
the keep-alive heartbeats every action this stack's hooks hold, and nothing is adopted. While Auto Scaling will not
list the held instances, or tell a group's hooks, the actions found orphaned before are kept alive under the hooks
found holding them (only the sweeper heartbeats them, and a hook's timeout may be shorter than two intervals); a
group's hooks not told, the held instances are probed under those it told before, and adopted once it tells them.

The first sightings live in the sweeper's container (sweeps run one at a time): a cold start forgets them,
which costs one more heartbeat and one more interval before the adoption, never an adoption too early. Nor a
global timeout reckoned too late: an adopted action is dated by its group's scaling activity too (see ``_adopt``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NoReturn

from nodecycle.domain.catalog import LifecycleHooks, ManagedGroups
from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.intake import Intake, IntakeOutcome
from nodecycle.domain.model import WARM_POOL, LifecycleRecord, Transition, global_deadline
from nodecycle.domain.ports.lifecycle import Autoscaling, ClaimingRecordStore, Hook, WaitingInstance
from nodecycle.domain.ports.runtime import Metrics
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, SweepFailed, failed_item, found_unlisted

log = logging.getLogger(__name__)


def _held_at(record: LifecycleRecord) -> tuple[bool | None, bool | None]:
    """Where ``record``'s action holds its instance, as far as its state tells it: in a warm pool's own wait
    state on its way into the pool (``Warmed:Pending:Wait``), on its way out of it terminated
    (``Warmed:Terminating:Wait``), or neither; None where the record does not say (no origin or destination). A
    launch out of the pool waits in ``Pending:Wait`` as any launch: its origin tells nothing."""
    into = None if record.destination is None else record.destination == WARM_POOL
    out_of = None
    if record.transition is Transition.TERMINATING and record.origin is not None:
        out_of = record.origin == WARM_POOL
    return into, out_of


Known = set[tuple[str, Transition, str, bool | None, bool | None]]


def _known(waiting: WaitingInstance, known: Known, hook: str) -> bool:
    """Whether a listed lifecycle's open action may be the one ``hook`` holds ``waiting`` by: of its instance,
    transition and hook, and held where that action would hold it. The listing comes from an index that lags, and the
    version it shows may be one whose action has ended since; an instance held where that action never holds it
    (taken out of its warm pool at once after its launch into the pool was completed, under the same hook) is
    held by another action, perhaps an orphan, and probed. (The same wait state again takes a round out of the
    pool and back into it: longer than an index lags.)"""
    into = waiting.destination == WARM_POOL
    out_of = waiting.transition is Transition.TERMINATING and waiting.origin == WARM_POOL
    return any(
        (waiting.instance_id, waiting.transition, hook, told_into, told_out_of) in known
        for told_into in (into, None)
        for told_out_of in (out_of, None)
    )


@dataclass(frozen=True)
class Orphan:
    """An action of one of this stack's hooks held with no record, kept alive by this sweep."""

    waiting: WaitingInstance
    hook: str
    first: datetime  # its first sighting
    listed_before: datetime | None  # the listing before it that did not show it, if this container knows it


class OrphanedActions:
    def __init__(
        self,
        *,
        groups: ManagedGroups,
        hooks: LifecycleHooks,
        autoscaling: Autoscaling,
        intake: Intake,
        records: ClaimingRecordStore,
        metrics: Metrics,
        adopt_after: timedelta,
    ) -> None:
        self._groups = groups
        self._records = records
        self._hooks = hooks
        self._autoscaling = autoscaling
        self._intake = intake
        self._metrics = metrics
        self._adopt_after = adopt_after
        # (instance, hook) -> its first sighting, and the listing before it that did not show it (if known)
        self._seen: dict[tuple[str, str], tuple[datetime, datetime | None]] = {}
        self._last_listed: datetime | None = None  # when the last sweep listed the held instances
        # what the keep-alive found, and when: the adoptions take only what their own sweep kept alive
        self._held: tuple[datetime | None, list[Orphan]] = (None, [])
        # the orphans last found held (by a listing, or by their own heartbeats while none could be made): kept
        # alive by instance id and hook while Auto Scaling will not list the held instances
        self._orphans: list[Orphan] = []
        # the held instances the last sweep, cut short, did not look at: the next looks at them first
        self._unlooked: set[tuple[str, Transition]] = set()
        # The held instances a listing showed that no probe settled (not looked at, or the probe failed) -> the
        # last listing that did not show them: a later first sighting of their actions dates from there, not
        # from a listing that showed them (an action's global timeout is reckoned from it: it must come no
        # later than the action started)
        self._unsettled: dict[tuple[str, Transition], datetime | None] = {}
        # The held instances a listing showed that a listed lifecycle of theirs hid (not probed: see _known) -> the
        # last listing before the first that showed them so. The lifecycle's action may not be the one holding the
        # instance (taken in from a message that named it with another instance's token, a version of a lifecycle
        # whose action is over that a lagging index lists, another hook's of the same termination): once it no
        # longer hides it, the action found is dated from there, not from a listing that showed it hidden
        self._hidden: dict[tuple[str, Transition], datetime | None] = {}
        # Each group's hooks as last read, for a sweep that cannot read them again (see _our_hooks), and the groups
        # this sweep could not
        self._hooks_read: dict[str, dict[str, Hook]] = {}
        self._hooks_unread: set[str] = set()

    def keep_alive(self, open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        """The sweep part right after the last chances (see order.sweep_parts): heartbeat every action held with no
        record. No record tells when its hook's heartbeat timeout ends, and the first sighting may come just before
        it: no later part may delay it."""
        self._hooks_unread = set()
        try:
            # (not a lifecycle whose action is over that still watches its node: into a warm pool, for weeks; the
            # instance's next action under the hook is another one)
            known = {
                (r.instance_id, r.transition, r.hook, *_held_at(r)) for r in open_records if r.action_open
            }
        except Exception:  # (whatever kept DynamoDB from listing them: logged whole, the sweep fails below)
            failed_item(
                log, "could not list the open lifecycles: every held action is kept alive, none adopted"
            )
            self._keep_every_action_alive(now, time)
        held: list[Orphan] = []
        self._held = (now, held)
        seen: dict[tuple[str, str], tuple[datetime, datetime | None]] = {}
        unsettled: dict[tuple[str, Transition], datetime | None] = {}
        looked = failed = 0
        cut_short = False
        try:
            waiting_instances = self._groups.waiting_instances()
        except Exception as error:  # (denied, throttled past the client's retries: logged whole below)
            self._keep_found_alive(error, open_records, held, time)
        # The instances a sweep cut short left unlooked at go first at the next: the listing comes in the same
        # order at every sweep, and each sweep would reach the same first ones again, never the others
        told: dict[str, set[str]] = {}
        for instance_id, _, hook, *_ in known:
            told.setdefault(instance_id, set()).add(hook)
        unread: set[str] = set()
        covered = [self._covered(w, known, told, unread) for w in waiting_instances]
        listed = sorted(
            (w for w, hides in zip(waiting_instances, covered, strict=True) if not hides),
            key=lambda w: (w.instance_id, w.transition) not in self._unlooked,
        )
        # (only a listing made: one that failed showed nothing, and did not fail to show an action)
        listed_before, self._last_listed = self._last_listed, now
        hidden = {
            (w.instance_id, w.transition): self._unshown_since((w.instance_id, w.transition), listed_before)
            for w, hides in zip(waiting_instances, covered, strict=True)
            if hides
        }
        self._unlooked = set()
        for index, waiting in enumerate(listed):
            instance = (waiting.instance_id, waiting.transition)
            before = self._unshown_since(instance, listed_before)
            if not time.enough():
                cut_short = True  # (the rest keep what was known of them: the next sweep looks at them first)
                self._unlooked = {(w.instance_id, w.transition) for w in listed[index:]}
                unsettled |= {key: self._unshown_since(key, listed_before) for key in self._unlooked}
                break
            looked += 1
            try:
                for hook in self._our_hooks(waiting.group, waiting.transition):
                    if _known(waiting, known, hook):
                        continue  # (its listed lifecycle keeps it alive: another of our hooks' is not)
                    if not self._held_by(waiting, hook):
                        continue  # this hook's action is over (ours, completed) or another hook holds it
                    if self._recorded(waiting, hook, open_records):
                        continue  # kept alive; its lifecycle is written, not listed yet: the lifecycles' part's
                    key = (waiting.instance_id, hook)
                    first, before_it = seen[key] = self._seen.get(key, (now, before))
                    held.append(Orphan(waiting, hook, first, before_it))
            except Exception:  # one instance's failure must not stop the others
                failed_item(log, "could not tell whether a hook of ours holds %s", waiting.instance_id)
                unsettled[instance] = before
                failed += 1
                self._keep_alive_as_found(waiting)
        # What is no longer held is forgotten (and what was adopted, once its record lists); what no probe
        # settled keeps its first sighting
        unsettled_instances = {instance_id for instance_id, _ in unsettled}
        self._seen = {key: value for key, value in self._seen.items() if key[0] in unsettled_instances} | seen
        self._unsettled, self._hidden = unsettled, hidden
        self._orphans = [
            *held,
            *(o for o in self._orphans if (o.waiting.instance_id, o.waiting.transition) in unsettled),
        ]
        self._metrics.count("LifecyclesOrphaned", len(held))
        if cut_short:
            raise time.cut_short(f"held instances left unlooked at after {looked} ({failed} failed)")
        if failed:
            raise SweepFailed(
                f"could not tell whether {failed} held instances are orphaned (the others were)"
            )
        if self._hooks_unread:
            raise SweepFailed(
                f"could not read the lifecycle hooks of {', '.join(sorted(self._hooks_unread))}: their held "
                "instances probed under the hooks read before"
            )
        return {"LifecyclesOrphaned": len(held)}

    def _covered(
        self, waiting: WaitingInstance, known: Known, told: dict[str, set[str]], unread: set[str]
    ) -> bool:
        """Whether listed lifecycles may hold ``waiting`` under every one of this stack's hooks of its transition on
        its group: not probed then. A group may have several of them (ManagedHooks "*", or naming two terminate
        hooks), each holding the instance by an action of its own, with a lifecycle of its own: one of them listed
        hides no other's orphan. The group's hooks as read last (one DescribeLifecycleHooks per group and ttl, read
        only for an instance some lifecycle is listed for); not told, any listed lifecycle covers the instance.
        ``told``: the hooks of the listed lifecycles, by instance; ``unread``: the groups whose hooks this sweep
        could not read (not asked again: each ask is retried, throttled, for seconds, and the heartbeats come first)."""
        if not any(_known(waiting, known, hook) for hook in told.get(waiting.instance_id, ())):
            return False
        if waiting.group in unread:
            return True
        try:
            hooks = self._hooks.of(waiting.group)
        except Exception as error:  # (the probes read them again, and tell a failure: see _our_hooks)
            log.warning("could not read the lifecycle hooks of %s (%r)", waiting.group, error)
            unread.add(waiting.group)
            return True
        return all(
            _known(waiting, known, name)
            for name, hook in hooks.items()
            if hook.transition is waiting.transition and self._groups.takes_hook(name)
        )

    def _unshown_since(
        self, instance: tuple[str, Transition], listed_before: datetime | None
    ) -> datetime | None:
        """The last listing known not to show ``instance`` held: the one before this sweep's, unless a sweep before
        left it unsettled or a listed lifecycle hid it (then the one before those sweeps' listings: theirs showed it).
        An instance is one or the other at a listing, never both."""
        if instance in self._unsettled:
            return self._unsettled[instance]
        return self._hidden.get(instance, listed_before)

    def _keep_alive_as_found(self, waiting: WaitingInstance) -> None:
        """Heartbeat the actions a sweep before found holding ``waiting`` with no record, under the hooks it found
        them held by, when its probe failed (the group's hooks not read: DescribeLifecycleHooks throttled or
        denied, read again at every sweep): no later sweep may come before such an action's heartbeat timeout.
        Its failure is the probe's, already told."""
        for orphan in self._orphans:
            if (orphan.waiting.instance_id, orphan.waiting.transition) != (
                waiting.instance_id,
                waiting.transition,
            ):
                continue
            try:
                self._held_by(orphan.waiting, orphan.hook)
            except Exception as error:  # (counted as the probe's heartbeats are)
                log.warning("could not keep the action of %s alive either (%r)", waiting.instance_id, error)

    def _keep_found_alive(
        self, error: Exception, open_records: Sequence[LifecycleRecord], held: list[Orphan], time: SweepTime
    ) -> NoReturn:
        """The keep-alive when Auto Scaling will not list the instances hooks hold (DescribeAutoScalingGroups denied
        to this role, or throttled past the client's retries). Only the sweeper heartbeats an orphan, once a sweep,
        and a hook's heartbeat timeout may be as short as an interval and a margin: a sweep that heartbeated
        nothing let such an action lapse before the next, and Auto Scaling applied the hook's default result (an
        undrained termination). So the orphans last found held are kept alive by their instance ids and hooks,
        their records looked for as after any heartbeat, and those still held are adopted in their time, as after a
        listing (their first sightings kept); new ones wait for a listing. The listing's failure is the part's
        (re-raised: the sweeper logs it whole and fails the sweep), what was kept alive all the same is logged."""
        failed = 0
        still: list[Orphan] = []
        for index, orphan in enumerate(self._orphans):
            if not time.enough():
                unreached = self._orphans[index:]  # (kept for the next sweep)
                self._orphans = still + unreached
                raise time.cut_short(
                    f"the held instances not listed ({error!r}): {len(unreached)} orphaned actions found before "
                    "not kept alive"
                ) from error
            try:
                if not self._held_by(orphan.waiting, orphan.hook):
                    continue  # (over: completed, or its instance gone)
                if self._recorded(orphan.waiting, orphan.hook, open_records):
                    continue  # (its lifecycle written since keeps it alive: forgotten, see _forget)
                still.append(orphan)
                held.append(orphan)
            except Exception:  # one instance's failure must not stop the others
                failed_item(log, "could not keep the action of %s alive", orphan.waiting.instance_id)
                still.append(orphan)
                failed += 1
        self._orphans = still
        self._metrics.count("LifecyclesOrphaned", len(held))
        log.error(
            "could not list the instances this stack's hooks hold (%r): kept alive the %d actions found orphaned "
            "before that are still held (%d could not be asked), looked for no others",
            error,
            len(still) - failed,
            failed,
        )
        raise error

    def _keep_every_action_alive(self, now: datetime, time: SweepTime) -> NoReturn:
        """The keep-alive when DynamoDB will not list the open lifecycles (its Query denied, a key disabled,
        throttled past the client's retries): no record tells which held actions are orphaned, and the lifecycles'
        part cannot heartbeat theirs either, while the drains, which read the same table, stall. Auto Scaling
        would apply the hooks' default result to every action at its heartbeat timeout: undrained terminations
        (invariant 11). So every action held under this stack's hooks is kept alive, those with a lifecycle too
        (a heartbeat only extends an action), and the outage costs time instead. Nothing is adopted, and nothing
        learnt of the first sightings: the next sweep that lists the open lifecycles judges the orphans. The
        part fails (the sweeper's dead-letter alarm), as the lifecycles' does. Auto Scaling not listing the held
        instances either, or not telling a group's hooks, the actions found orphaned before are kept alive under
        the hooks found holding them (see ``_keep_found_alive``)."""
        self._held = (now, [])
        kept = failed = 0
        try:
            waiting_instances = self._groups.waiting_instances()
        except Exception:  # (re-raised: logged whole by the sweeper)
            found = {(o.waiting.instance_id, o.waiting.transition): o.waiting for o in self._orphans}
            for waiting in found.values():
                if not time.enough():
                    break  # (the listing's failure is the part's, and says the sweep failed)
                self._keep_alive_as_found(waiting)
            raise
        for waiting in waiting_instances:
            if not time.enough():
                raise time.cut_short(
                    f"the open lifecycles not listed: {kept} held actions kept alive, the rest not ({failed} failed)"
                )
            try:
                for hook in self._our_hooks(waiting.group, waiting.transition):
                    kept += self._held_by(waiting, hook)
            except Exception:  # one instance's failure must not stop the others
                failed_item(log, "could not keep the actions holding %s alive", waiting.instance_id)
                failed += 1
                self._keep_alive_as_found(waiting)
        raise SweepFailed(
            f"the open lifecycles could not be listed: kept every held action alive ({kept}; {failed} instances "
            "failed), adopted none"
        )

    def adopt(self, open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        """A later sweep part: start the lifecycle of each action this sweep kept alive that was first found
        ``adopt_after`` ago (intake had its time). An adoption takes several calls (intake's path): it comes
        after every heartbeat, the lifecycles' too."""
        adopted = failed = unadopted = 0
        # (group, instance) -> when its group's activity that holds it began: read once a sweep
        began: dict[tuple[str, str], datetime | None] = {}
        kept_alive_at, held = self._held
        for orphan in held if kept_alive_at == now else ():
            if now - orphan.first < self._adopt_after:
                log.warning(
                    "%s is held by hook %s with no lifecycle record: kept alive, adopted unless its event comes "
                    "within %s",
                    orphan.waiting.instance_id,
                    orphan.hook,
                    self._adopt_after,
                )
                continue
            if orphan.waiting.group in self._hooks_unread:
                # (found under the hooks read before: adopted once a sweep reads them, as intake's path reads them)
                log.warning(
                    "%s is held with no lifecycle record: adopted once its group's hooks are read",
                    orphan.waiting.instance_id,
                )
                continue
            if not time.enough():
                unadopted += 1  # kept alive: adopted by the next sweep
                continue
            try:
                adopted += self._adopt(orphan, now, began)
            except Exception:  # one instance's failure must not stop the others
                failed_item(log, "could not adopt the action of %s", orphan.waiting.instance_id)
                failed += 1
                continue
            self._forget(orphan)
        self._metrics.count("LifecyclesAdopted", adopted)
        if unadopted:
            raise time.cut_short(f"{unadopted} orphaned actions kept alive but not adopted, {failed} failed")
        if failed:
            raise SweepFailed(f"{failed} orphaned actions could not be adopted")
        return {"LifecyclesAdopted": adopted}

    def _forget(self, orphan: Orphan) -> None:
        """No longer keep ``orphan`` alive as found (``_keep_found_alive``): its action has a lifecycle now, which
        keeps it alive. Remembered past it, a later sweep whose listing fails heartbeats by instance id and hook
        whatever action that hook holds then (the instance's next one: out of its warm pool into service, under
        the launch hook that held its move into the pool), and, that lifecycle over, adopted it at once as this
        orphan: under this one's move (into the pool: completed at once, no readiness gate, no address) and its
        first sighting (no interval for its own event to come)."""
        key = (orphan.waiting.instance_id, orphan.waiting.transition, orphan.hook)
        self._orphans = [
            o for o in self._orphans if (o.waiting.instance_id, o.waiting.transition, o.hook) != key
        ]

    def _adopt(self, orphan: Orphan, now: datetime, began: dict[tuple[str, str], datetime | None]) -> bool:
        """Start the lifecycle of an action held with no record; whether intake accepted it. ``began``: the
        activities this sweep read, by group and instance (an instance held by several hooks is read once)."""
        hook = self._hooks_read.get(orphan.waiting.group, {}).get(orphan.hook)
        timeout = timedelta(seconds=hook.heartbeat_timeout if hook is not None else 0)
        # An action still held began less than its global timeout ago
        earliest = None if hook is None else now - (global_deadline(now, hook.heartbeat_timeout) - now)
        # It started after the last listing that did not show it. A cold container does not know when that was:
        # held with no record, and kept alive by no sweep before, the action began within its hook's heartbeat
        # timeout of the first sighting (it would have timed out otherwise), or a sweep interval if that is longer.
        unseen = max(2 * self._adopt_after, timeout)
        since = orphan.listed_before if orphan.listed_before is not None else orphan.first - unseen
        # Its global timeout is reckoned from here, and Auto Scaling reckons it from the action's true start. The
        # listings err late where this container did not see the action begin: started cold (a deploy, Lambda's
        # recycling) after earlier sweeps kept it alive for hours without adopting it (intake refused), or after
        # they took it for a listed lifecycle's; no sighting bounds those. Late, the lifecycle's guard would settle
        # it after Auto Scaling applied the hook's default result (invariant 11). The group's activity that holds
        # the instance began no later than the action: the earlier of the two.
        instance = (orphan.waiting.group, orphan.waiting.instance_id)
        if instance not in began:
            began[instance] = None if earliest is None else self._activity_started(orphan, earliest)
        activity = began[instance]
        if earliest is not None and since < earliest:
            # The last listing that did not show it came before that (the listings failed for longer, and this
            # container remembered it across them): it tells nothing. So dated, intake would refuse the adoption as
            # expired at every sweep, until Auto Scaling applied the hook's default result. Dated by the activity,
            # or else that bound (settled at once)
            since = activity if activity is not None else earliest
        elif activity is not None and activity < since:
            log.info(
                "the action of %s is dated by its group's activity, begun at %s (the listings said %s)",
                orphan.waiting.instance_id,
                activity,
                since,
            )
            since = activity
        if self._intake.adopt(orphan.waiting, orphan.hook, since) is not IntakeOutcome.ACCEPTED:
            return False  # (intake said why: a lifecycle of the action was written first)
        log.warning(
            "adopted the %s action of %s under hook %s, held with no lifecycle record since %s: its event was "
            "lost or dead-lettered",
            orphan.waiting.transition.short,
            orphan.waiting.instance_id,
            orphan.hook,
            orphan.first,
        )
        return True

    def _activity_started(self, orphan: Orphan, since: datetime) -> datetime | None:
        """When the group began what holds the orphan's instance (DescribeScalingActivities, a page as a rule:
        those in progress come first), looked for since ``since`` (the hook's global timeout back: an action begun
        before it is over); None when it lists none, or will not answer (denied, throttled): the listings date it
        then."""
        try:
            return self._autoscaling.activity_started(orphan.waiting.group, orphan.waiting.instance_id, since)
        except Exception as error:  # (any failure: one that is not AWS's, a bug, with its traceback)
            log.warning(
                "could not read the scaling activity of %s's group (%r): its action dated by the listings alone",
                orphan.waiting.instance_id,
                error,
                exc_info=not isinstance(error, TransientError),
            )
            return None

    def _recorded(self, waiting: WaitingInstance, hook: str, open_records: Sequence[LifecycleRecord]) -> bool:
        """Whether a lifecycle of the action is written though the listing did not show it: the list of open
        lifecycles comes from a global secondary index, which lags the table (by under a second usually, by
        minutes while it is throttled or backfilling), and a lifecycle intake has just written may be missing
        from it. Its action's claim and record, read consistently, tell: taken for an orphan, it was counted
        (``LifecyclesOrphaned``), then its adoption went through intake's path, which found the claim, but only
        once it had counted the action received a second time and its event a duplicate. Read only for the
        actions held with no listed lifecycle, once each is kept alive (the heartbeats come first). A read that
        fails tells nothing: the action is judged an orphan, as before (an adoption still finds the claim).

        A lifecycle found so is told to the sweep's open lifecycles (:func:`found_unlisted`): the lifecycles'
        part, which comes next, repairs it as a listed one. The probe's heartbeat keeps its action alive, but only
        that part resumes a lifecycle whose message is lost and completes an action at its last chance: an index
        lagging for longer than a sweep interval (throttled, backfilling) would otherwise leave a stalled
        action to reach its global timeout unsettled."""
        try:
            claim = self._records.claim(waiting.action(hook))
            record = None if claim is None else self._records.get(claim.lifecycle)
        except Exception as error:  # (any failure: one that is not AWS's, a bug, with its traceback)
            log.warning(
                "could not read the claim on the action of %s (%r)",
                waiting.instance_id,
                error,
                exc_info=not isinstance(error, TransientError),
            )
            return False
        if record is None or record.finished or not record.action_open:
            return False
        log.info(
            "%s is held by hook %s for lifecycle %s, not listed yet (the index lags): repaired as listed",
            waiting.instance_id,
            hook,
            record.id,
        )
        found_unlisted(open_records, record)
        return True

    def _our_hooks(self, group: str, transition: Transition) -> list[str]:
        """This stack's hooks of ``transition`` on ``group`` (read once per group and ttl). When Auto Scaling will not
        tell them (DescribeLifecycleHooks throttled past the client's retries, denied), those it told before: only
        the sweeper heartbeats an action held with no record, and one first held since would otherwise lapse at its
        heartbeat timeout, undrained, while the read fails (a refresh of hundreds of nodes, every drain calling Auto
        Scaling). A hook rarely changes; a heartbeat under one deleted since is refused, harmlessly, and one created
        since waits for a read. (The sweep fails all the same: its alarm.)"""
        try:
            hooks = self._hooks.of(group)
        except Exception as error:
            if group not in self._hooks_read:
                raise
            if group not in self._hooks_unread:
                log.warning(
                    "could not read the lifecycle hooks of %s (%r): probed under those read before",
                    group,
                    error,
                )
            self._hooks_unread.add(group)
            hooks = self._hooks_read[group]
        else:
            self._hooks_read[group] = hooks
        return [
            name
            for name, hook in hooks.items()
            if hook.transition is transition and self._groups.takes_hook(name)
        ]

    def _held_by(self, waiting: WaitingInstance, hook: str) -> bool:
        """Whether ``hook`` holds an action of the instance: a heartbeat by instance id is accepted only then,
        and keeps it alive until the next sweep."""
        try:
            held = self._autoscaling.heartbeat(waiting.action(hook))
        except AccessRefused:
            # (counted as the lifecycles' refused heartbeats are: the alarm on them pages within a minute, the
            # sweep's own failure only through its errors' period)
            self._metrics.count("HeartbeatRetries", reason="refused")
            raise
        except TransientError:
            # (a throttled one likewise, and late: nothing but the sweeper keeps such an action alive)
            self._metrics.count("HeartbeatRetries")
            self._metrics.count("HeartbeatsThrottledLate")
            raise
        if held:
            self._metrics.count("Heartbeats")
        return held
