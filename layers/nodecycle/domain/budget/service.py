"""The disruption budget of one stack (owner): slots for draining nodes, shared with the other stacks.

Every operation is one read-modify-write of the shared document through :class:`BudgetStore`; the
decisions themselves are the pure functions of :mod:`.rules`, re-run on every retry of a conflicting write.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

from nodecycle.domain.budget import rules
from nodecycle.domain.budget.document import BudgetDocument, Holder, OwnerLimits, Waiter
from nodecycle.domain.budget.errors import WriteOutcomeUnknown
from nodecycle.domain.budget.limits import BudgetLimits, Decisive, NodeState, owner_limits
from nodecycle.domain.budget.requests import SlotDecision, SlotReason, SlotRequest
from nodecycle.domain.budget.seed import DrainInProgress, DrainsInProgress, seeded
from nodecycle.domain.budget.view import BudgetView, view_of
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.budget import BudgetStore, NodeInventory
from nodecycle.domain.ports.runtime import Clock, Metrics

log = logging.getLogger(__name__)


class Lifecycles(Protocol):
    """What the lifecycles' records tell the budget of a slot it cannot vouch for (see
    :meth:`DisruptionBudget.renew`)."""

    def gave_back(self, request: SlotRequest) -> bool:
        """Whether the request's lifecycle (its record, token and beginning) has given its slot back, or is giving
        it back, as its record tells now: over, or at its cleanup. False for a lifecycle at any step before its
        cleanup, and for one that started over on the record since."""
        ...

    def drains(self, owner: str) -> list[DrainInProgress]:
        """``owner``'s drains in progress as their records tell them: each lifecycle at its eviction, with the
        node it drains. Read when a document is seeded (see :meth:`DisruptionBudget._seeded`): a drain whose node
        object was deleted under it (its pods still bound to the name) has no node left to show it."""
        ...


@dataclass(frozen=True)
class SweepResult:
    holders: tuple[Holder, ...] = ()  # this owner's holders removed
    waiters: tuple[Waiter, ...] = ()  # this owner's waiters removed
    wake: tuple[str, ...] = ()  # record ids of this owner's lifecycles to wake: slots passed on to them
    passed: tuple[Waiter, ...] = ()  # this owner's waiters the sweep passed a slot on to


@dataclass(frozen=True)
class Verdict:
    """The sweeper's judgement of this owner's live entries (see :meth:`DisruptionBudget.sweep`), by record id."""

    stale: frozenset[str] = frozenset()  # to remove: the node, the instance or the lifecycle is gone
    # Waiters whose lifecycle it could not tell alive (no time left to read its record, a read refused): kept in
    # line, but passed no slot, which one whose lifecycle is gone would hold idle until its entry expired
    unjudged: frozenset[str] = frozenset()


@dataclass(frozen=True)
class _Passed:
    wake: list[str]  # the record ids of this owner's lifecycles to wake
    waiters: tuple[Waiter, ...]  # those passed a slot by the write


@dataclass(frozen=True)
class _Claimed:
    """What a slot request's write decided, and what the service tells of it once written."""

    decision: SlotDecision
    waited: timedelta | None = None  # how long the node waited, when it is granted after waiting
    passed: tuple[Waiter, ...] = ()  # this owner's waiters the write passed a slot on to
    # this owner's waiters that gave up their places in line for a forced slot (see :func:`rules.shed`)
    shed: tuple[Waiter, ...] = ()


@dataclass(frozen=True)
class _Written[T]:
    result: T
    holders: int | None  # live holders after the write; None when nothing was written


class DisruptionBudget:
    def __init__(
        self,
        *,
        store: BudgetStore,
        nodes: NodeInventory,
        clock: Clock,
        metrics: Metrics,
        limits: BudgetLimits,
        holder_ttl: timedelta,
        count_unavailable: bool,
        owner: str,
        drains: DrainsInProgress | None = None,
        lifecycles: Lifecycles | None = None,
        waiter_asks_within: timedelta | None = None,
    ) -> None:
        """``drains``: where a document never written is seeded from (see :mod:`.seed`); None: not seeded (a
        store that never loses its document). ``lifecycles``: what tells a renewal's slot the budget cannot vouch
        for (see :meth:`renew`); None: not asked (a store that never loses its document). ``waiter_asks_within``:
        the longest a node waiting in line waits between its asks (the drain's cadence), which its place need only
        outlast (see :func:`rules.fresh_waiter`); None: not told, a place renewed a third of the TTL apart, as a
        slot is."""
        self._asks_within = waiter_asks_within
        self._store = store
        self._drains = drains
        self._lifecycles = lifecycles
        self._nodes = nodes
        self._clock = clock
        self._metrics = metrics
        self._limits = limits
        self._ttl = holder_ttl
        self._count_unavailable = count_unavailable
        self._owner = owner

    @property
    def waiter_asks_within(self) -> timedelta | None:
        """The longest a node waiting in line waits between its asks, as told (see ``__init__``)."""
        return self._asks_within

    def acquire(self, request: SlotRequest) -> SlotDecision:
        """Take a slot for the node, or join (or renew) its place among the waiters. Idempotent. The
        decision names this owner's waiters that its write made eligible, by removing expired entries, and
        passed their slots on to (see :func:`rules.pass_on`): wake them."""
        return self._claim(request, renewing=False)

    def renew(self, request: SlotRequest) -> SlotDecision:
        """Renew the node's slot. A holder that expired and was removed takes a slot again when there is
        room; otherwise it is denied (reason ``lost``) and waits like any other node. Wakes as
        :meth:`acquire`.

        A slot taken again that the document cannot vouch for (``unmarked``: its ConfigMap was created again
        after the lifecycle began, and the mark of a release that refuses a late delivery may have gone with the
        one before) is checked against the lifecycle's record (``lifecycles``) before it is written: a lifecycle
        over takes no slot, its node marked given back instead in the same write, and the renewal is refused as
        any late delivery's (``released``: its commit loses). Else a late poll of a finished drain's eviction (a
        duplicate that ran past its cleanup) held the slot idle until the sweeper or the TTL freed it, while
        nodes waited. A drain still running keeps it (its own: renewed by its polls, given back by its
        cleanup). So too for a place in line such a renewal would take when there is no room (a new waiter, of a
        lifecycle begun before the document): as a drain in progress it went first, and was passed the next slot
        freed. The steps that renew (the eviction's polls, a refused cordon's retries) hold no record store.
        The first ask, which does, reads the record itself (see AcquireSlot)."""
        return self._claim(request, renewing=True)

    def release(
        self, node: str, record_id: str, token: str | None = None, *, gone: str | None = None
    ) -> list[str]:
        """Give back the slot of ``node`` held for lifecycle ``record_id`` (and drop its waiter entry, if any).

        By lifecycle, never by node name alone: node names are reused (a recycled private IP), and a late
        cleanup of an old lifecycle must not free the slot of a new one on a node of the same name. The
        lifecycle (``record_id`` of ``token``) takes no slot again for a TTL, even when another removed its
        slot before (see :func:`rules.release`).

        Returns the record ids of this owner's waiters that this release made eligible (and the expired
        entries its write removed), in order, whose slots its write passed on to them: wake them.
        A release that removes no entry (a repeated one; one after another removed the slot, which only
        marks the node given back) passes slots on to every eligible waiter of this owner, and returns those
        and the lifecycles its first write passed slots on to that have not renewed them yet, so a crash
        before the wake-up is repaired by the redelivery.

        ``gone``: the instance of a lifecycle that ends it (see ``ENDS_ITS_INSTANCE``): this owner's other entries
        of it go in the same write, as :meth:`forget` removes them.
        """
        nodes = self._scope()

        def mutate(current: BudgetDocument | None) -> tuple[BudgetDocument | None, _Passed]:
            if current is None:
                return current, _Passed([], ())
            now = self._clock.now()
            live = rules.prune(current, now)
            doc, holder, waiter = rules.release(
                live, node, self._owner, now=now, ttl=self._ttl, record_id=record_id, token=token
            )
            other = live.holder(node)
            if holder is None and other is not None:
                log.warning(
                    "the budget slot of %s is held by owner %s for %s, not by us for %s: left alone",
                    node,
                    other.owner,
                    other.record_id,
                    record_id,
                )
            removed = holder is not None or waiter is not None
            if gone is not None:
                freed = doc
                doc = self._without_instance(doc, gone, now)
                removed = removed or doc is not freed
            # (resolved on the document this writes: the node given back leaves the scope with its instance)
            limits = self._own_limits(nodes, doc)
            woken = self._woken_by_removal(current, doc, limits, removed=removed)
            # A release repeated after a crash before its wake-ups: those it passed slots on to then, if they
            # have not renewed them since (perhaps never woken), are woken again. Then: by the mark as read,
            # not as this write leaves it (a mark it writes now, after another removed the slot, dates the
            # slots passed on now by another writer: the sweeper's, that woke them already)
            mark = None if removed else rules.mark_of(live, node, self._owner, record_id)
            repair = [] if mark is None else rules.passed_on(doc, self._owner, at=mark.released_at)
            return self._pass_on(current, doc, limits, woken, now, repair=[h.record_id for h in repair])

        return self._wake_passed(self._write(mutate))

    def forget(self, owner: str, instance_id: str) -> list[str]:
        """Remove this owner's entries of an instance that is gone (stopped or terminated outside the
        hooks), whichever lifecycle holds them; the record ids of this owner's waiters to wake, as for
        :meth:`release`. A forget that removes no entry (repeated after a wake-up SQS refused, which failed
        its step) wakes also every holder of this owner passed a slot that has not renewed it since: the
        instance's entries are gone, so which of them its first write passed slots on to is not told apart,
        and a waiter passed a slot is no longer among the eligible waiters woken."""
        if owner != self._owner:
            raise ValueError(f"owner {owner!r} asked the budget of {self._owner!r} to forget an instance")
        nodes = self._scope()

        def mutate(current: BudgetDocument | None) -> tuple[BudgetDocument | None, _Passed]:
            if current is None:
                return current, _Passed([], ())
            now = self._clock.now()
            live = rules.prune(current, now)
            doc = self._without_instance(live, instance_id, now)
            limits = self._own_limits(nodes, doc)
            removed = doc is not live
            woken = self._woken_by_removal(current, doc, limits, removed=removed)
            repair = [] if removed else [h.record_id for h in rules.passed_on(doc, self._owner)]
            return self._pass_on(current, doc, limits, woken, now, repair=repair)

        return self._wake_passed(self._write(mutate))

    def _without_instance(self, doc: BudgetDocument, instance_id: str, now: datetime) -> BudgetDocument:
        """``doc`` without this owner's entries of an instance that is gone, whichever lifecycle holds them
        (``doc`` itself when it has none)."""
        for entry in [e for e in doc.entries() if e.owner == self._owner and e.instance_id == instance_id]:
            doc, _, _ = rules.release(
                doc,
                entry.node,
                self._owner,
                now=now,
                ttl=self._ttl,
                record_id=entry.record_id,
                by_its_lifecycle=False,
            )
        return doc

    def sweep(self, *, stale: Callable[[Sequence[Holder | Waiter]], Verdict]) -> SweepResult:
        """Remove this owner's entries that expired or that ``stale`` declares stale (node or instance gone,
        lifecycle record finished). ``stale`` is asked once, with every live entry of this owner in the document
        the update reads first, and answers the record ids of those that are stale: one read of the document
        when nothing is stale (an idle sweep), and the write carries the version the entries were judged in (a
        write that conflicts, more likely for the judgement's time, reads again and removes the entries judged
        stale that are still as they were judged: the second read the sweep made every time before).

        The room freed goes to this owner's eligible waiters, in the same write, but for the waiters ``stale``
        left unjudged and that are still as they were then (one that renewed its place since asked meanwhile:
        its lifecycle is alive): the room goes past them to the next, and they keep their places in line for
        their own asks or the next sweep's judgement. Those are waiters whose lifecycle was not among the open
        ones the sweep listed: a lifecycle that is over, most likely, or one that began during the sweep.

        A document that is not there at all (its ConfigMap deleted) fails the sweep through the store (the
        Kubernetes store's ``BudgetNotInstalled``: the ConfigMap and the fix); one never written (created
        again empty) is seeded first, as at any write, and the seeded holders of this owner judged with the
        others (a stale annotation's, whose lifecycle is over or whose instance is gone, swept at once)."""
        nodes = self._scope()
        doomed: list[Holder | Waiter] | None = None
        unjudged: list[Waiter] = []

        def mutate(current: BudgetDocument | None) -> tuple[BudgetDocument | None, SweepResult]:
            nonlocal doomed
            if current is None:
                # No document at all (its ConfigMap deleted, not created again): nothing to sweep, and every drain's
                # ask fails meanwhile. Told, not passed over in silence: the empty document's write is one the
                # store never makes (it does not create the document), and fails naming the document and the fix.
                return BudgetDocument(), SweepResult()
            now = self._clock.now()
            if doomed is None:
                live = [e for e in current.entries() if e.owner == self._owner and not e.expired(now)]
                verdict = stale(live) if live else Verdict()
                doomed = [entry for entry in live if entry.record_id in verdict.stale]
                unjudged.extend(w for w in current.waiters if w in live and w.record_id in verdict.unjudged)
                now = self._clock.now()  # (the judgement may have taken a while)
            expired = [e for e in current.entries() if e.owner == self._owner and e.expired(now)]
            doc = rules.prune(current, now)
            removed: list[Holder | Waiter] = list(expired)
            # Only the entries judged that are still as they were judged: after a conflicting write the document
            # read again may hold, at a judged entry's node and record id, another lifecycle's (the record
            # started over, an instance's next maintenance) or a renewed one, which the judgement did not see
            # (the next sweep judges them)
            unchanged = {(e.node, e.record_id) for e in current.entries() if e in doomed}
            for node, record_id in sorted(unchanged):
                doc, holder, waiter = rules.release(
                    doc,
                    node,
                    self._owner,
                    now=now,
                    ttl=self._ttl,
                    record_id=record_id,
                    by_its_lifecycle=False,
                )
                removed += [e for e in (holder, waiter) if e is not None]
            limits = self._own_limits(nodes, doc)
            # The line the room freed is passed on in: without the waiters set aside
            aside = [w for w in doc.waiters if w in unjudged]
            line = (
                doc
                if not aside
                else doc.model_copy(update={"waiters": tuple(w for w in doc.waiters if w not in aside)})
            )
            written, passed = self._pass_on(current, line, limits, self._wake_list(line, limits), now)
            if line is not doc:
                # the waiters set aside back in their places (nothing passed on: the write without a line set aside)
                written = (
                    _back_in_line(written, doc.waiters, aside)
                    if passed.waiters
                    else self._pass_on(current, doc, limits, (), now)[0]
                )
            result = SweepResult(
                holders=tuple(e for e in removed if isinstance(e, Holder)),
                waiters=tuple(e for e in removed if isinstance(e, Waiter)),
                wake=tuple(passed.wake),
                passed=passed.waiters,
            )
            return written, result

        result = self._write(mutate)
        self._tell_passed(result.passed)
        self._metrics.count("SweptHolders", len(result.holders))
        for entry in (*result.holders, *result.waiters):
            log.info("swept the budget entry of %s (record %s)", entry.node, entry.record_id)
        return result

    def snapshot(self) -> BudgetView:
        """The budget as it is, with this owner's limits resolved now."""
        now = self._clock.now()
        doc = self._store.read() or BudgetDocument()
        limits = self._own_limits(self._scope(), rules.prune(doc, now), written=False)
        doc = rules.with_own_limits(doc, self._owner, limits)
        return view_of(doc, now)

    def _claim(self, request: SlotRequest, *, renewing: bool) -> SlotDecision:
        if request.owner != self._owner:
            raise ValueError(
                f"a slot request of owner {request.owner!r} made to the budget of {self._owner!r}"
            )
        # (a new place in line dates from the ask, not from the write that won its race: see rules._queued)
        asked = self._clock.now()
        nodes = self._scope()
        # Whether the request's lifecycle gave its slot back, as its record tells: read once, for the first
        # write that would grant a slot it cannot vouch for (the retries of a conflicting write ask no more)
        gave_back: list[bool] = []

        def over(unvouched: bool) -> bool:
            if not unvouched or self._lifecycles is None:
                return False
            if not gave_back:
                gave_back.append(self._lifecycles.gave_back(request))
            return gave_back[0]

        def mutate(current: BudgetDocument | None) -> tuple[BudgetDocument | None, _Claimed]:
            now = self._clock.now()
            # A holder that renewed lately (a drain's every poll) needs neither this owner's limits nor the nodes
            # in scope: decided before they are worked out
            held = None if current is None else rules.fresh_holder(current, request, now)
            if held is not None:
                if not renewing:
                    assert current is not None  # (a holder was found in it)
                    held = replace(held, held_unmarked=rules.held_unmarked(current, request, held))
                return current, _Claimed(held)
            live = rules.prune(current or BudgetDocument(), now)
            limits = self._own_limits(nodes, live, asking=request.node)
            # judged under the limits this owner resolves now (a node back in service, a redeploy may free a
            # slot), and written when that changes the answer, or when its limits changed in a way other owners
            # must know (see may_skip_writing_limits)
            fresh = (
                rules.fresh_waiter(
                    rules.with_own_limits(current, self._owner, limits),
                    request,
                    now,
                    renewing=renewing,
                    asks_within=self._asks_within,
                )
                if current is not None and rules.may_skip_writing_limits(current, self._owner, limits)
                else None
            )
            if fresh is not None:
                return current, _Claimed(fresh)
            doc = rules.with_own_limits(live, self._owner, limits)
            doc, decision, waited, eligible, shed = rules.claim(
                doc, request, now=now, ttl=self._ttl, renewing=renewing, asked=asked
            )
            if decision.reason is SlotReason.QUEUE_FULL:
                return current, _Claimed(decision)  # nothing to write for a node that is not let in
            decision = replace(decision, unmarked=rules.unmarked(live, request, decision, renewing=renewing))
            if not renewing:
                decision = replace(decision, held_unmarked=rules.held_unmarked(live, request, decision))
            # (a first ask's slot granted is read by its step itself, see AcquireSlot; its new place in line here)
            unvouched = decision.unmarked if renewing else False
            if over(unvouched or rules.queued_unmarked(live, request, decision, renewing=renewing)):
                # A late delivery of a lifecycle that gave the slot back before the ConfigMap was created again
                # (see renew): its node marked given back in this document, in the write that would have taken
                # the slot. Not taken, then given back in a second write: when that one failed (a 500, a 429, a
                # 409 storm), the step's redelivery found the slot held and renewed lately, no longer one it
                # could not vouch for, and it stood idle until the sweeper or its TTL freed it. Nor put in line,
                # when there is no room: as a drain in progress (or in its place back, waiting since before the
                # re-creation) it went ahead of the nodes not yet touched, and the next slot freed was passed on to
                # it, idle until its place's TTL.
                log.info(
                    "budget slot for %s: asked for by a late delivery of lifecycle %s, which gave it back: "
                    "marked given back",
                    request.node,
                    request.record_id,
                )
                given = rules.given_back(
                    rules.with_own_limits(live, self._owner, limits), request, now=now, ttl=self._ttl
                )
                refused = rules.refused(given, SlotReason.RELEASED)
                woken = self._newly_eligible(current or BudgetDocument(), given, limits)
                written, passed = self._pass_on(current, given, limits, woken, now)
                return written, _Claimed(replace(refused, wake=tuple(passed.wake)), None, passed.waiters)
            if decision.reason is SlotReason.FORCED:
                doc, more = rules.shed(doc, self._owner, now)
                shed = (*shed, *more)
                decision = replace(decision, waiting=len(doc.waiters))
            woken = self._newly_eligible(current or BudgetDocument(), doc, limits, eligible)
            written, passed = self._pass_on(current, doc, limits, woken, now)
            return written, _Claimed(replace(decision, wake=tuple(passed.wake)), waited, passed.waiters, shed)

        claimed = self._write(mutate)
        decision, waited, shed = claimed.decision, claimed.waited, claimed.shed
        self._tell_passed(claimed.passed)
        if shed:
            log.error(
                "the budget's line was full when node %s took its %s: %d waiters of this stack gave up their places "
                "in line for it, and ask again later: %s%s",
                request.node,
                "forced slot" if decision.reason is SlotReason.FORCED else "place (it goes before them)",
                len(shed),
                ", ".join(w.node for w in shed[:10]),
                ", ..." if len(shed) > 10 else "",
            )
            # counted as nodes that found the queue full: they wait outside it now
            self._metrics.count("BudgetQueueFull", len(shed))
        if waited is not None:
            self._metrics.seconds("BudgetWait", waited.total_seconds())
        if decision.reason is SlotReason.QUEUE_FULL:
            log.error(
                "the budget's queue is full (%d waiters): node %s waits outside it and asks again later",
                decision.waiting,
                request.node,
            )
            self._metrics.count("BudgetQueueFull")
        log.info(
            "budget slot for %s: %s (%s; %d holders, %d waiting%s)",
            request.node,
            "granted" if decision.granted else "denied",
            decision.reason,
            decision.holders,
            decision.waiting,
            "" if decision.position is None else f", position {decision.position}",
        )
        return decision

    def _scope(self) -> list[NodeState] | None:
        """The nodes listed in scope, read before a write's read-modify-write (a list of nodes inside it would
        widen the window another writer's race falls in); None when the limits need none."""
        # The node list is needed only for percent limits and unavailable-node counting (and is cached).
        needed = self._limits.has_percent or self._count_unavailable
        return self._nodes.nodes_in_scope() if needed else None

    def _own_limits(
        self,
        nodes: list[NodeState] | None,
        doc: BudgetDocument,
        *,
        asking: str | None = None,
        written: bool = True,
    ) -> OwnerLimits:
        """This owner's limits over ``nodes``, less the nodes ``doc`` (pruned) shows leaving: those are in
        the document, not in the node list, and change with every release (see :func:`limits.in_scope`).
        ``written``: to be written into ``doc``, with only the unavailable nodes that can change a decision in
        it, the node ``asking`` among them (see :func:`limits.decisive_unavailable`)."""
        leaving = rules.leaving(doc) if nodes is not None else set()
        decisive = None
        if written:
            held = {h.node for h in doc.holders}
            named = held | {w.node for w in doc.waiters} | {r.node for r in doc.released}
            decisive = Decisive(named=named | ({asking} if asking else set()), uncounted=held | leaving)
        return owner_limits(
            self._limits,
            count_unavailable=self._count_unavailable,
            nodes=nodes,
            now=self._clock.now(),
            leaving=leaving,
            decisive=decisive,
        )

    def _wake_list(self, doc: BudgetDocument, limits: OwnerLimits) -> list[str]:
        """This owner's eligible waiters in ``doc``, under ``limits`` (as resolved now)."""
        judged = rules.with_own_limits(doc, self._owner, limits)
        return [
            w.record_id for w in rules.eligible_waiters(judged, self._clock.now()) if w.owner == self._owner
        ]

    def _woken_by_removal(
        self, stored: BudgetDocument, after: BudgetDocument, limits: OwnerLimits, *, removed: bool
    ) -> list[str]:
        """This owner's waiters to wake after a release or a forget turned ``stored`` into ``after``: those
        that take the room the write added (see :meth:`_newly_eligible`). When it ``removed`` no entry of its
        own (a repeated one, after a crash before its wake-ups; a lifecycle's cleanup after another removed its
        slot, which only marks the node given back), every eligible waiter is woken, so that the redelivery
        repairs the crash."""
        if not removed:
            return self._wake_list(after, limits)
        return self._newly_eligible(stored, after, limits)

    def _newly_eligible(
        self,
        stored: BudgetDocument,
        after: BudgetDocument,
        limits: OwnerLimits,
        eligible: list[Waiter] | None = None,
    ) -> list[str]:
        """This owner's waiters to wake once the write of ``after`` replaces ``stored`` (the document as
        read, not pruned): those that take the room the write added, by the entries it removed, its own and
        the expired ones of any owner that every writer prunes (a drain that died, a waiter that stopped
        asking), or by the limits it records (looser now: a percent of a scope that grew).

        The waiters eligible as the document was stored (under the limits recorded in it, which its writer
        woke them under) were woken by that writer, their wake-up perhaps still queued, or take their room at
        their own retry: the room of those still waiting is theirs. The room added is the waiters eligible
        now less those; it goes, in the replay's order, to the waiters eligible now and not as stored, of
        every owner (another owner's takes it at its own retry, or at its owner's next write). Without that bound,
        a newcomer's ask, which
        frees nothing, woke a waiter whenever it changed the zone with the most waiters left and so who is
        first in line: in a burst of 500 asks, 7 wake-ups per slot freed, one waiter woken again and again,
        most of them finding it gone on. (Waking every eligible waiter on every release did the same at 300
        nodes: a dozen wake-ups per hand-over, flooding the drain queue that carries them.)

        This owner's waiters among those still waiting and eligible are woken too (their slots passed on): no
        writer woke them. A write of this owner that makes one eligible passes it its slot (a holder then, no
        longer waiting), so one that owns its room as stored was made eligible by another owner's write (its
        release), which cannot reach this stack's queue. Each is passed its slot once: woken again and again it
        cannot be.

        ``eligible``: the waiters eligible in ``after`` under ``limits``, when the caller replayed it already."""
        now = self._clock.now()
        judged = rules.with_own_limits(after, self._owner, limits)
        if eligible is None and rules.same_line(stored, judged):
            # (a renewal that expired nothing: the same replay as stored, so no room added; skipped, as a
            # replay is most of a write's CPU with hundreds of waiters)
            return []
        before = _entries(rules.eligible_waiters(stored, now))
        waiting = _entries(after.waiters)
        if eligible is None:
            eligible = rules.eligible_waiters(judged, now)
        owned = before & waiting
        if owned - _entries(eligible):
            # Some of them are not eligible now: a newcomer ahead in line has their room (it is still theirs
            # to give), or something outside the document took it (a tighter limit, a node cordoned by hand
            # while counting unavailable nodes): then they own no room, and standing for the room this write
            # added, they left it idle until a waiter's own retry. Only those that fit on their own keep one.
            alone = judged.model_copy(
                update={"waiters": tuple(w for w in judged.waiters if (w.node, w.record_id) in owned)}
            )
            owned = _entries(rules.eligible_waiters(alone, now))
        rooms = len(eligible) - len(owned)
        fresh = [w for w in eligible if (w.node, w.record_id) not in before][: max(0, rooms)]
        # This owner's waiters that own their room and still wait were woken by no writer: a write of this owner that
        # makes one eligible passes it its slot in that write (it holds then, it waits no more). Another owner's write
        # made them eligible (its release), and that owner cannot reach this stack's queue: passed their slots and
        # woken by this write, they take them now, not at their own retry (up to RETRY_IN_LINE_FACTOR x
        # BudgetRetrySeconds later), the slot idle meanwhile.
        woken = _entries(fresh) | (owned & _entries(eligible))
        return [w.record_id for w in eligible if w.owner == self._owner and (w.node, w.record_id) in woken]

    def _pass_on(
        self,
        current: BudgetDocument | None,
        doc: BudgetDocument,
        limits: OwnerLimits,
        woken: Sequence[str],
        now: datetime,
        *,
        repair: Sequence[str] = (),
    ) -> tuple[BudgetDocument | None, _Passed]:
        """What to write in place of ``current``: ``doc`` (with this owner's limits) with the slots of the
        waiters ``woken`` passed on to them (see :func:`rules.pass_on`), only when it differs from
        ``current``; and whom to wake: those, and the lifecycles of ``repair``. (Any other lost wake-up is
        repaired by the waiter's own retry, which finds its slot held.)"""
        judged = rules.with_own_limits(doc, self._owner, limits)
        passed = rules.pass_on(judged, woken, self._owner, now)
        result = _Passed([*(w.record_id for w in passed.waiters), *repair], passed.waiters)
        if doc is current and not passed.waiters:
            return current, result  # nothing to write
        return passed.doc, result

    def _wake_passed(self, passed: _Passed) -> list[str]:
        self._tell_passed(passed.waiters)
        return passed.wake

    def _tell_passed(self, waiters: Iterable[Waiter]) -> None:
        """Log and measure the slots a write passed on: their lifecycles' wait ends with this write."""
        now = self._clock.now()
        for waiter in waiters:
            log.info("budget slot for %s: passed on to its waiter (record %s)", waiter.node, waiter.record_id)
            self._metrics.seconds("BudgetWait", (now - waiter.waiting_since).total_seconds())

    def _write[T](self, mutate: Callable[[BudgetDocument | None], tuple[BudgetDocument | None, T]]) -> T:
        """Run ``mutate`` through the store; count conflicts and report the holders after a write. A write
        whose outcome is unknown (its answer lost) is read back: found stored as written, it landed, and its
        result is returned as if answered (see :meth:`_landed`)."""
        attempts = 0
        # the last attempt's document to write and its result (None: it wrote nothing), and the document it read
        last: list[tuple[BudgetDocument, _Written[T]] | None] = [None]
        read: list[BudgetDocument | None] = [None]

        def counted(current: BudgetDocument | None) -> tuple[BudgetDocument | None, _Written[T]]:
            nonlocal attempts
            attempts += 1
            read[0] = current
            if current is not None and (current.unwritten or current.unvouched):
                # (the store writes the seed, whatever ``mutate`` decides: it differs from what it read)
                current = self._seeded(current)
            doc, result = mutate(current)
            written = _Written(result, None if doc is current or doc is None else len(doc.holders))
            last[0] = None if doc is current or doc is None else (doc, written)
            return doc, written

        try:
            written = self._store.update(counted)
        except WriteOutcomeUnknown as unknown:
            written = self._landed(last[0], read[0], unknown)
        finally:
            if attempts > 1:
                self._metrics.count("BudgetConflicts", attempts - 1)
        if written.holders is not None:
            self._metrics.count("BudgetHolders", written.holders)
        return written.result

    def _landed[T](
        self,
        sent: tuple[BudgetDocument, _Written[T]] | None,
        based_on: BudgetDocument | None,
        unknown: WriteOutcomeUnknown,
    ) -> _Written[T]:
        """The result of the write ``sent`` (its document and result) whose answer was lost (``unknown``), when
        the document read back is that document, as written: it landed, and nobody wrote since. Otherwise
        ``unknown`` is raised: the step is retried, and a repeated release or forget (which finds its entry
        gone) wakes those its first write passed slots on to; anything else is judged at the retry. But when the
        document read back is still the one the write was decided on (``based_on``), byte for byte, the write
        had not landed by then (every write stamps its decision's time; one still held by the API server, past a
        client's timeout, may land later: the step's retry finds it, a repeated release waking by its mark those
        it passed slots on to, an ask its slot held): a plain :class:`TransientError`, so
        that a renewal refused so at every try (a webhook on ConfigMaps that cannot be reached: 500, nothing
        written) is known as not renewed, and its drain counts its slot lost once its TTL has run, not renewed
        by each try (invariants 1 and 9: it had ended at its drain timeout beside the node its slot went to).

        Why: a write that passes slots on (a release, any write that removes an expired holder) is the only
        one to wake their lifecycles, whose next asks would find their slots held; told of an error, its writer
        woke nobody, and the slots stood idle until the waiters' own retries. The read
        back is one GET after a failed write; one that fails too raises ``unknown``. A write that did not land
        (the document as it was read) is not sent again here: the step's retry decides again on what is there,
        as after any transient error."""
        if sent is None:
            raise unknown
        try:
            stored = self._store.read()
        except Exception as error:  # (any failure to read it back leaves the outcome as unknown as it was)
            raise unknown from error  # (the read's own error kept as the cause, for the step's log)
        doc, written = sent
        if stored is not None and based_on is not None and stored.to_json() == based_on.to_json():
            raise TransientError(
                f"the budget's write did not land: {unknown}", retry_after=unknown.retry_after
            ) from unknown
        # (byte for byte: every write stamps the time of its decision, so another writer's document is not ours)
        if stored is None or stored.unwritten or stored.unvouched or stored.to_json() != doc.to_json():
            raise unknown
        log.info("the budget write's answer was lost, and the document read back shows it landed")
        return written

    def _seeded(self, doc: BudgetDocument) -> BudgetDocument:
        """A document never written (the ConfigMap's first use, or created again after a deletion), or one the
        store cannot vouch for (restored from a backup, re-applied), pruned, with the drains in progress its nodes
        show as holders (see :mod:`.seed`): one list of the nodes, only then. A
        list that fails fails the write (the step is retried): a decision on a document that forgets drains
        in progress may grant past the limits."""
        if self._drains is None:
            # (nothing to seed it from: decided on as it is, and vouched for, as a store that never loses it holds it)
            return doc.model_copy(update={"unwritten": False, "unvouched": False})
        drains = self._drains.drains_in_progress()
        if self._lifecycles is not None:
            # A drain whose node object was deleted while its instance runs evicts the pods left bound to the name
            # (drain/orphans.py): no node shows it, no annotation, no cordon. Left out, its slot went to another
            # node while it evicted, until its next renewal paused it (invariant 1). Its record tells it: this
            # owner's open records, one query, only here (another owner's such drains are its own records').
            shown = {drain.node for drain in drains}
            drains += [drain for drain in self._lifecycles.drains(self._owner) if drain.node not in shown]
        now = self._clock.now()
        # (an expired entry of a restored document may name the node of a drain that began since)
        seed, holders = seeded(rules.prune(doc, now), drains, now=now, ttl=self._ttl)
        if len(holders) < len({d.node for d in drains} - {e.node for e in doc.entries()}):
            log.error(
                "the budget document would pass its size bound with every drain in progress: %d of %d seeded",
                len(holders),
                len(drains),
            )
        log.warning(
            "the budget ConfigMap holds %s: seeded with the %d drains in progress its nodes show%s",
            "no document (its first use, or it was deleted and created again)"
            if doc.unwritten
            else "a document no nodecycle wrote to it (restored from a backup, a snapshot applied again, edited by "
            "hand)",
            len(holders),
            "".join(f"\n  {h.node}: {h.owner}, record {h.record_id}" for h in holders[:20]),
        )
        return seed


def _back_in_line(
    written: BudgetDocument | None, line: Sequence[Waiter], aside: Sequence[Waiter]
) -> BudgetDocument | None:
    """``written`` (a line without the waiters ``aside``, some passed a slot) with those waiters back in their
    places of ``line``, the line as it was before."""
    if written is None:
        return None
    now_waiting = {(w.node, w.record_id): w for w in written.waiters}
    waiters = (w if w in aside else now_waiting.get((w.node, w.record_id)) for w in line)
    return written.model_copy(update={"waiters": tuple(w for w in waiters if w is not None)})


def _entries(waiters: Iterable[Waiter]) -> set[tuple[str, str]]:
    """The waiters by node and lifecycle: one waiter's entry in two documents (a node's entry of another
    lifecycle is another waiter)."""
    return {(w.node, w.record_id) for w in waiters}
