"""The budget's decisions: pure functions of a document, a request and the time.

**Expiry.** A holder or waiter is stale once ``renewedAt + ttlSeconds`` is reached. Stale entries do not
count, and every writer removes them (of every owner) before it decides anything; it wakes the waiters of its
owner that take the room their removal added, as a release does, and no more (a wake only comes sooner than
the waiter's own retry; the room of a waiter eligible before the write is that waiter's, woken already). The
sweeper removes also its own entries whose instance is gone or whose lifecycle record is finished (a node gone is
not a drain over: see :mod:`nodecycle.domain.sweep.budget_entries`).

**Passing slots on.** A write that makes waiters of its own owner eligible (a release, the removal of expired
entries, the sweeper's) grants them their slots itself, in the replay's order (:func:`pass_on`), and wakes
them: the woken lifecycle finds its slot held, and cordons without writing. Another owner's waiter is never
granted by this one: its slot stays free for it, and it takes it at its own retry, or at its own owner's next
write that replays the line, which passes it its slot and wakes it (that owner's waiters that own their room and
still wait were woken by nobody: see ``DisruptionBudget._newly_eligible``).

**What takes a slot.** The *occupancy* an owner sees is: every live holder, of every owner, in scope or not;
plus, when that owner counts unavailable nodes, the nodes in its scope that are unschedulable or NotReady,
unless a holder has them or the lifecycle that drained them gave their slot back less than a TTL ago (the
drained node stays cordoned until its instance is gone) and nobody removed a slot of the node since (a
drain whose slot the stop of its instance or an operator removed may still run). A node counts once however many reasons it has. An owner's limits (total, and
per zone) bound the occupancy it sees.

**Zones.** A node whose zone is unknown might be in any zone, so it counts against every zone: the load of
zone Z is its nodes plus the nodes of unknown zone. Granting an unknown-zone node needs room in every zone
(those with nodes in scope, those of the occupants, and one more zone with no node in scope at all).

**Eligibility (precedence, then the zone with the most work left, work-conserving).** Replay the live
waiters, starting from the occupancy of live holders: again and again, among the waiters that still fit
(each under *its own owner's* recorded limits and unavailable nodes, and leaving every waiter picked before
it the room it was picked for under *that* waiter's owner's limits: owners may have different limits, and a
looser owner's node must not take the slot a stricter owner's older one was picked for), pick the first by
this order and add it to the occupancy, until none fits:

1. a node *in progress* (cordoned and partly drained: its drain lost its slot) — disruption already done
   goes on before any new one; oldest first;
2. a node whose action's global timeout is near (``urgentAt`` passed) — earliest first;
3. a node passed over ``MAX_PASSED`` times already — oldest first (the bound on the next rule's unfairness, and
   on another stack's: a node that another stack's younger grants leave out of its own stack's view, though it
   would fit beside its own stack's holders, counts a pass at each such grant; see :func:`_crowded_out`);
4. any other node: the one of the zone with the most waiters left in this replay, then the oldest. Under a
   per-zone limit, first come first served leaves the last drains of a refresh bunched in one zone while the
   other zones' slots idle; draining the zone with the most work left first keeps every zone busy to the end.

The waiters picked in this replay are *eligible*. A request is granted only when it is eligible: a newcomer
joins the queue first, so it goes before an older waiter only by this order; a waiter whose zone is full is
skipped, never waited for, but for one of the first two classes that the holders keep out (not the unavailable
nodes its owner counts alone), or of the third that other stacks' holders keep out: the replay keeps its room, and a waiter after it goes only if it leaves that
waiter the room it needs once what keeps it out is gone (a node of unknown zone, or a stricter owner's,
would otherwise fit at no pick while younger ones take every slot that comes free, and be forced past the
budget at the end of its urgent window; see :func:`_kept_for`). When a waiter is granted, each older waiter that would have fit at its pick (and
came after it in the order) counts one more ``passed``. Because every owner replays the same document with
the same recorded limits, all stacks agree on who is next, and a slot an eligible waiter of another stack is
owed stays free for it (it takes it at its next retry) instead of going to another one.

**Forced holders.** A node whose action's global timeout is too near to wait takes a slot even without room
(it goes either way, and the drain at least respects PodDisruptionBudgets): it counts against the limits, so
the others wait for it. Only a node nobody else holds or waits for may be forced (invariant 3).

**Holders.** One holder per node: a node that holds a slot and asks again holds it again (renewed; taken
over by a lifecycle of another instance of the node's name). Another lifecycle of the holder's instance does
not take it over (one slot, one lifecycle): it waits in line for the node, eligible once the holder is
released or expired, and so woken by that release (or the write that removes the expired holder) as any
waiter it made eligible. A node has one place in
line: a third lifecycle of the instance leaves it to the one that took it first, and asks again at its retry. A holder's renewal is written only
when a third of the TTL has passed since the last written one, a waiter's once its place would expire within two
of its asks' longest interval (when the budget is told it), or when an entry expired (its removal is
written, and wakes the waiters it made eligible). A holder that expired and was removed asks
again like a newcomer, through the queue. A holder seeded from its node into a document created again (see
:mod:`.seed`) is renewed at its lifecycle's first ask since only when it fits beside the other holders (its node
does not tell whether its drain held its slot or had lost it and paused), and otherwise asks again like a
holder that expired. A node already counted as unavailable takes its slot without taking
a new one. A lifecycle that released its slot less than a TTL ago takes none again, whoever held the node
since: its request is a late delivery of an earlier step (a duplicate whose write was retried after the
release), whose commit loses, so nothing would ever give that slot back. A lifecycle is its record and
token, as begun: a disruption's record (one per instance and cause) starts over under another token (a Spot
instance interrupted again, the next maintenance), and an adopted lifecycle's (one per instance and hook)
under the same token when the instance is held again: either takes a slot as any other, as only a request of
a lifecycle begun before the release is refused.

A node that is held or queued by another owner is handed off, never taken (invariant 3), until that entry
expires; unless the entry is another instance's. Instance ids are never reused, node names are (a recycled
private IP): an entry of another instance is for a node gone with its instance (its release lost), and the
name is the request's instance's node now (every caller checks the node by name first). It is stale, and
removed, as a holder of the same owner for another instance is taken over.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any, NamedTuple

from nodecycle.domain.budget.document import (
    MAX_CLOCK_AHEAD,
    BudgetDocument,
    Holder,
    OwnerLimits,
    Released,
    ResolvedLimits,
    Waiter,
)
from nodecycle.domain.budget.requests import SlotDecision, SlotReason, SlotRequest

# A renewal is written once a third of the holder's TTL has passed since the last written one, so after any
# renewal a holder has at least two thirds of its TTL left.
RENEWALS_PER_TTL = 3
# How long the limits of a stack with no holder and no waiter stay in the document (for `budget show`).
LIMITS_RETENTION = timedelta(days=1)


def prune(doc: BudgetDocument, now: datetime) -> BudgetDocument:
    """The document without expired entries; ``doc`` itself when nothing expired."""
    holders = tuple(h for h in doc.holders if not h.expired(now))
    waiters = tuple(w for w in doc.waiters if not w.expired(now))
    # (kept while the node is held again: a late delivery of a lifecycle that gave its slot back is refused,
    # whoever took the node since)
    released = tuple(r for r in doc.released if not r.expired(now))
    active = {h.owner for h in holders} | {w.owner for w in waiters}
    limits = {
        owner: entry
        for owner, entry in doc.limits.items()
        if owner in active or now - entry.updated_at < LIMITS_RETENTION
    }
    if (
        len(holders) == len(doc.holders)
        and len(waiters) == len(doc.waiters)
        and len(released) == len(doc.released)
        and len(limits) == len(doc.limits)
    ):
        return doc
    return doc.model_copy(
        update={"holders": holders, "waiters": waiters, "released": released, "limits": limits}
    )


class Occupancy:
    """The nodes that take a slot, with their zones; counts kept as nodes are added."""

    def __init__(self, nodes: dict[str, str | None]) -> None:
        self._nodes: dict[str, str | None] = {}
        self._by_zone: Counter[str] = Counter()
        self._unknown = 0
        for node, zone in nodes.items():
            self.add(node, zone)

    def add(self, node: str, zone: str | None) -> None:
        if node in self._nodes:
            return
        self._nodes[node] = zone
        if zone is None:
            self._unknown += 1
        else:
            self._by_zone[zone] += 1

    def counts(self, node: str) -> bool:
        return node in self._nodes

    def admits(self, node: str | None, zone: str | None, limits: ResolvedLimits) -> bool:
        """Whether ``node`` may take a slot under ``limits``; a node already counted takes no new one (None:
        a node not counted yet)."""
        if node in self._nodes:
            return True
        if len(self._nodes) >= limits.total:
            return False
        per_zone = limits.per_zone
        if per_zone is None:
            return True
        if zone is not None:
            return self.load(zone) < per_zone.of(zone)
        return all(self.load(z) < per_zone.of(z) for z in self._every_zone(limits))

    def _every_zone(self, limits: ResolvedLimits) -> tuple[str | None, ...]:
        """The zones a node of unknown zone counts against: those of the nodes counted, those of the limits,
        and None for a zone with no node in scope (its limit is ``other``): the unknown node may be there."""
        return (*(set(self._by_zone) | limits.zones()), None)

    def keeps_admitting(
        self, zone: str | None, pending: Iterable[str | None], limits: ResolvedLimits, *, waiting: int = 0
    ) -> bool:
        """Whether one more node of ``zone``, counted, leaves room for the nodes of zones ``pending`` that a
        replay picked and counted already (see :func:`_replay`): each would still be admitted in its turn.
        ``waiting``: that many more nodes of each zone of ``pending`` are not counted yet (a waiter the replay
        keeps room for, which does not fit yet), and must still fit beside it."""
        if len(self._nodes) + waiting >= limits.total:
            return False
        per_zone = limits.per_zone
        if per_zone is None:
            return True
        for picked in set(pending):
            # the zones both nodes count against: a node of unknown zone counts against every zone
            if zone is None and picked is None:
                shared = self._every_zone(limits)
            elif zone is None or picked is None or zone == picked:
                shared = (picked if zone is None else zone,)
            else:
                continue  # two known zones apart: the new node takes none of the pick's zone
            if any(self.load(z) + waiting >= per_zone.of(z) for z in shared):
                return False
        return True

    def without_blockers(self, zone: str | None, limits: ResolvedLimits) -> Occupancy:
        """This occupancy without the nodes that keep a node of ``zone`` out of a zone it counts against (the
        nodes of each such zone at its limit, and those of unknown zone): what is left once they are gone, as
        they must be before it fits. Nothing removed for a full total alone: any one node's going frees it."""
        per_zone = limits.per_zone
        if per_zone is None:
            return self
        zones = (zone,) if zone is not None else self._every_zone(limits)
        full = {z for z in zones if self.load(z) >= per_zone.of(z)}
        if not full:
            return self
        # (a node of unknown zone counts against every zone, the full ones among them)
        return Occupancy({n: z for n, z in self._nodes.items() if z is not None and z not in full})

    def load(self, zone: str | None) -> int:
        """Nodes in ``zone`` plus those of unknown zone (``zone=None``: those of unknown zone only)."""
        return self._unknown + (0 if zone is None else self._by_zone[zone])


def counted_unavailable(doc: BudgetDocument, limits: OwnerLimits) -> dict[str, str | None]:
    """The unavailable nodes an owner counts, without those held or just given back by the lifecycle that
    drained them: those whose last mark names a lifecycle. A slot removed by another (the stop of its
    instance, the sweeper, an operator's release of a stuck holder) leaves a drain that may still run, and its
    cordoned node unavailable, even when lifecycles that held the node before it gave it back; until the next
    mark naming a lifecycle (any lifecycle of the owner cleaning up on the node, a late delivery of an earlier
    one's cleanup too) excuses the node again for a TTL, as docs/design.md says. (The nodes ``limits`` records are
    already without those their nodes say are released: see ``NodeState.released``. The stop of an instance marks its
    node so as it removes its slot: its capacity is gone with the stop, as the cloud provider's shutdown taint then
    says too, and what its drain may still do there takes nothing more.)"""
    skip = {h.node for h in doc.holders} | leaving(doc)
    return {n.name: n.zone for n in limits.unavailable if n.name not in skip}


def leaving(doc: BudgetDocument) -> set[str]:
    """The nodes whose last mark of a slot given back names a lifecycle, that nobody holds again: drained,
    by any owner, their instance ended by that lifecycle and their node object lingering until the cloud
    provider deletes it. A TTL after the mark, a node still there is counted as any other."""
    last: dict[str, Released] = {}
    for mark in doc.released:
        if mark.node not in last or mark.released_at >= last[mark.node].released_at:
            last[mark.node] = mark
    held = {h.node for h in doc.holders}
    return {node for node, mark in last.items() if mark.record_id is not None and node not in held}


MAX_PASSED = 3  # a waiter passed over this often goes next, oldest first (after the precedence classes)
# The queue's bounds. The API server refuses a ConfigMap over 1 MiB, and a waiter takes 300-650 bytes (its
# node's name, its owner's id, its record's): 2,000 waiters of long names, with the owners' recorded limits
# (their unavailable nodes), can pass it. So a new waiter also needs the document to stay under
# MAX_DOCUMENT_BYTES, with room left for holders and renewals. A node that finds the queue full is told so
# and asks again later, outside the queue. A forced slot is taken whatever the bound, and then the youngest
# waiters of its stack give up their places in line until the document is back under it (see :func:`shed`).
MAX_WAITERS = 2000
MAX_DOCUMENT_BYTES = 900 * 1024


def eligible_waiters(doc: BudgetDocument, now: datetime) -> list[Waiter]:
    """The waiters that get a slot, in order (see the module docstring). ``doc`` pruned; or as stored, to
    tell who was eligible when it was written (its entries expired since still counted)."""
    return [waiter for waiter, _ in _replay(doc, now)]


def _replay(doc: BudgetDocument, now: datetime) -> list[tuple[Waiter, list[Waiter]]]:
    """The eligible waiters in the order they are picked, each with the waiters that fit at its pick."""
    granted = {h.node: h.zone for h in doc.holders}
    occupancy = {  # what each owner sees taken: every holder, and the unavailable nodes it counts
        owner: Occupancy({**counted_unavailable(doc, limits), **granted})
        for owner, limits in doc.limits.items()
    }
    # The line sorted once by each waiter's standing (computed once: a replay runs on every write, over
    # hundreds of waiters in a burst, and picks until the slots are full). The standing orders the picks but
    # for the zone with the most work left, which ranks the last class and changes as the replay picks.
    line = sorted(
        (
            (_standing(w, now, arrival), w, (w.owner, w.zone))  # join order breaks ties
            for arrival, w in enumerate(doc.waiters)
            if w.node not in granted and w.owner in doc.limits
        ),
        key=itemgetter(0),
    )
    groups = {group for _, _, group in line}
    work_left = Counter(w.zone for _, w, _ in line)
    picks: list[tuple[Waiter, list[Waiter]]] = []
    pending: dict[str, list[str | None]] = {}  # owner -> the zones of its waiters picked so far
    kept = _kept_for(line, occupancy, doc)
    line = [e for e in line if e not in kept]
    while line:
        # The waiters of one owner and zone fit alike, but for a node its owner counts already (which takes no
        # new slot): asked once per group, not once per waiter.
        room = {(o, z): occupancy[o].admits(None, z, doc.limits[o].resolved) for o, z in groups}
        # A pick must also leave the waiters picked before it (of other owners) their room under their own
        # owners' limits, or a looser owner's newcomer takes the slot a stricter owner's older waiter was
        # picked for: granted first (the older one takes it only at its retry), it fills that owner's view.
        leaves = {
            (other, z): occupancy[other].keeps_admitting(z, zones, doc.limits[other].resolved)
            for other, zones in pending.items()
            for z in {z for o, z in groups if o != other}
        }
        # (the waiters kept room for, each with what its owner sees taken once what keeps it out is gone)
        keeping = [
            (standing, w, occupancy[w.owner].without_blockers(w.zone, doc.limits[w.owner].resolved))
            for standing, w, _ in kept
        ]
        fitting = [
            e
            for e in line
            if _fits(e[1], e[2], room, leaves, pending, occupancy)
            and all(
                _leaves_room(e[1], w, rest, occupancy, doc)
                for standing, w, rest in keeping
                if standing < e[0]
            )
        ]
        if not fitting:
            break
        # The occupancy only grows during a replay: a waiter that does not fit now fits at no later pick.
        line = fitting.copy()
        best = fitting[0]
        if best[0][0] == _ANY_OTHER:
            # all that fit are of the last class: the zone with the most work left goes first, and the line's
            # order within it and between zones of as much work (max keeps the first of equals)
            best = max(fitting, key=lambda e: work_left[e[1].zone])
        waiter = best[1]
        picks.append((waiter, [w for _, w, _ in fitting]))
        if not occupancy[waiter.owner].counts(waiter.node):
            # (a node its owner counts already takes no new slot in that owner's view: it is admitted whatever
            # comes beside it, and keeping room for it would leave a slot idle until its retry)
            pending.setdefault(waiter.owner, []).append(waiter.zone)
        for taken in occupancy.values():
            taken.add(waiter.node, waiter.zone)
        line.remove(best)
        work_left[waiter.zone] -= 1
    return picks


def _kept_for(
    line: Sequence[tuple[tuple[Any, ...], Waiter, tuple[str, str | None]]],
    occupancy: dict[str, Occupancy],
    doc: BudgetDocument,
) -> list[tuple[tuple[Any, ...], Waiter, tuple[str, str | None]]]:
    """The waiters of ``line`` (the replay's, sorted) that the replay keeps room for although they do not fit
    yet: those with precedence (a drain in progress, a node near its global timeout) that the holders alone
    keep out, each under its own owner's limits. Work-conserving for them, the replay let younger waiters
    that fit take each slot that came free first: a node of unknown zone under a per-zone limit, or a stricter
    owner's beside a looser one's refresh, then fit at no pick until the holders all happened to be gone at
    once, and an urgent one waited out its whole urgent window to be forced past the budget (invariant 9:
    it goes first). The window is a whole drain long, so the holders' drains end within it and make room.
    (One that the unavailable nodes its owner counts keep out keeps no room: holding the others back would
    not let it in.) So too for a waiter passed over ``MAX_PASSED`` times that other owners' holders keep out
    (see :func:`_crowded_out`), but not one that its own owner's holders keep out: passed over within its own
    stack by the zone with the most work left, it waits for its stack's own drains, which leave as they came,
    and holding the other zones back for it would idle their slots."""
    kept = []
    views = _OwnViews(doc)
    for entry in line:
        standing, waiter, (owner, zone) = entry
        resolved = doc.limits[owner].resolved
        if standing[0] > _PASSED_OVER or occupancy[owner].admits(waiter.node, zone, resolved):
            continue
        if not views.alone(owner).admits(waiter.node, zone, resolved):
            continue
        if standing[0] == _PASSED_OVER and not views.own(owner).admits(waiter.node, zone, resolved):
            continue
        kept.append(entry)
    return kept


class _OwnViews:
    """What each owner of ``doc`` sees taken, by parts, worked out once per owner: the unavailable nodes it
    counts (``alone``), and those with its own holders (``own``)."""

    def __init__(self, doc: BudgetDocument) -> None:
        self._doc = doc
        self._counted: dict[str, dict[str, str | None]] = {}
        self._alone: dict[str, Occupancy] = {}
        self._own: dict[str, Occupancy] = {}

    def counted(self, owner: str) -> dict[str, str | None]:
        if owner not in self._counted:
            self._counted[owner] = counted_unavailable(self._doc, self._doc.limits[owner])
        return self._counted[owner]

    def alone(self, owner: str) -> Occupancy:
        if owner not in self._alone:
            self._alone[owner] = Occupancy(self.counted(owner))
        return self._alone[owner]

    def own(self, owner: str) -> Occupancy:
        if owner not in self._own:
            mine = {h.node: h.zone for h in self._doc.holders if h.owner == owner}
            self._own[owner] = Occupancy({**self.counted(owner), **mine})
        return self._own[owner]


def _crowded_out(
    doc: BudgetDocument, granted: Waiter, taken: dict[str, str | None], fitting: Collection[str]
) -> Iterator[str]:
    """The nodes of the waiters of other owners, older than ``granted``, that the write's grants (``taken``, its
    nodes and their zones) leave out of their owner's view though they would fit beside their owner's own holders:
    a stricter stack's waiter beside a looser stack's refresh. Each is passed over once more per such grant (not
    those of ``fitting``, counted as the waiters that fit at the pick: see :func:`_passed_over`). A looser stack
    fills every slot it frees with its next node, and the stricter stack's view stays full: without a count, its
    node waited until its global timeout made it urgent (hours into a refresh); passed over ``MAX_PASSED`` times,
    the replay keeps its room (see :func:`_kept_for`), the looser stack's holders drain down under the stricter
    limit, and it goes."""
    holders = {h.node: h.zone for h in doc.holders}
    views = _OwnViews(doc)
    seen: dict[str, Occupancy] = {}  # what each owner sees taken once the write's grants hold
    for waiter in doc.waiters:
        owner = waiter.owner
        if (
            owner not in doc.limits
            or owner == granted.owner
            or waiter.waiting_since >= granted.waiting_since
            or waiter.node in taken
            or waiter.node in fitting
            or waiter.node in holders
            or granted.node in views.counted(owner)  # (the grant took none of its owner's room)
        ):
            continue
        resolved = doc.limits[owner].resolved
        if not views.own(owner).admits(waiter.node, waiter.zone, resolved):
            continue  # (its own owner's drains keep it out)
        if owner not in seen:
            seen[owner] = Occupancy({**views.counted(owner), **holders, **taken})
        if not seen[owner].admits(waiter.node, waiter.zone, resolved):
            yield waiter.node


def _leaves_room(
    waiter: Waiter, kept: Waiter, rest: Occupancy, occupancy: dict[str, Occupancy], doc: BudgetDocument
) -> bool:
    """Whether ``waiter``, picked, leaves ``kept`` (a waiter the replay keeps room for: see :func:`_kept_for`)
    the room it needs under its owner's limits once what keeps it out now is gone (``rest``: its owner's
    occupancy without those nodes): one more node of its zone beside it. Not counting those nodes, which
    ``kept`` waits for whatever comes beside it, the younger waiters of other zones go on while they leave it
    its room (work-conserving), and none takes a zone's slot, nor the total's, that ``kept`` needs."""
    if occupancy[kept.owner].counts(waiter.node):
        return True
    return rest.keeps_admitting(waiter.zone, (kept.zone,), doc.limits[kept.owner].resolved, waiting=1)


def _fits(
    waiter: Waiter,
    group: tuple[str, str | None],
    room: dict[tuple[str, str | None], bool],
    leaves: dict[tuple[str, str | None], bool],
    pending: dict[str, list[str | None]],
    occupancy: dict[str, Occupancy],
) -> bool:
    """Whether ``waiter`` fits at this pick of the replay: under its owner's limits, and leaving every other
    owner's earlier picks their room; an owner that counts the node already sees no new slot taken."""
    owner, zone = group
    if not (room[group] or occupancy[owner].counts(waiter.node)):
        return False
    return all(
        leaves[(other, zone)] or occupancy[other].counts(waiter.node) for other in pending if other != owner
    )


def same_line(a: BudgetDocument, b: BudgetDocument) -> bool:
    """Whether ``a`` and ``b`` replay alike at any time, by what the replay reads: the same waiters (the same
    tuple: a write that changes none keeps it, and comparing hundreds would cost what the replay does), the
    holders' nodes and zones, the same marks of slots given back, and each owner's resolved limits and
    unavailable nodes. False may be a false negative, never a false positive."""
    return (
        a.waiters is b.waiters
        and a.released is b.released
        and [(h.node, h.zone) for h in a.holders] == [(h.node, h.zone) for h in b.holders]
        and a.limits.keys() == b.limits.keys()
        and all(
            (a.limits[owner].resolved, a.limits[owner].unavailable)
            == (b.limits[owner].resolved, b.limits[owner].unavailable)
            for owner in a.limits
        )
    )


# The classes of the replay's order (see the module docstring), lowest first.
_IN_PROGRESS, _URGENT, _PASSED_OVER, _ANY_OTHER = range(4)


def _standing(waiter: Waiter, now: datetime, arrival: int) -> tuple[Any, ...]:
    """A waiter's class and its place in it, but for the work left in its zone (see :func:`_precedence`);
    the classes never compare their second members."""
    if waiter.in_progress:
        return (_IN_PROGRESS, waiter.waiting_since, arrival)
    if waiter.urgent_at is not None and now >= waiter.urgent_at:
        return (_URGENT, waiter.urgent_at, arrival)
    if waiter.passed >= MAX_PASSED:
        return (_PASSED_OVER, waiter.waiting_since, arrival)
    return (_ANY_OTHER, waiter.waiting_since, arrival)


def _precedence(
    waiter: Waiter, now: datetime, work_left: Counter[str | None], arrival: int
) -> tuple[Any, ...]:
    """The order of the replay's picks (lowest first): the standing, the last class by the zone with the
    most work left first."""
    standing = _standing(waiter, now, arrival)
    if standing[0] != _ANY_OTHER:
        return standing
    return (_ANY_OTHER, -work_left[waiter.zone], *standing[1:])


def with_own_limits(doc: BudgetDocument, owner: str, limits: OwnerLimits) -> BudgetDocument:
    return doc.model_copy(update={"limits": {**doc.limits, owner: limits}})


def may_skip_writing_limits(doc: BudgetDocument, owner: str, limits: OwnerLimits) -> bool:
    """Whether ``owner``'s limits recorded in ``doc`` may stand although it resolves ``limits`` now: configured
    alike, and no tighter now. Other owners replay this owner's waiters under the recorded ones: looser than
    its own, they would keep a slot for a waiter it will not grant (a percent of a scope that shrank), which
    their own waiters then lose. Looser now, nothing is kept from anyone: the write waits for the waiter's
    renewal, or for the answer it changes (containers' node caches differ, and would write back and forth)."""
    recorded = doc.limits.get(owner)
    configured = ("max_unavailable", "max_unavailable_per_zone", "count_unavailable")
    if recorded is None or any(getattr(recorded, f) != getattr(limits, f) for f in configured):
        return False
    was, now = recorded.resolved, limits.resolved
    if now.total < was.total or (was.per_zone is None) != (now.per_zone is None):
        return False
    if was.per_zone is None or now.per_zone is None:
        return True
    zones = set(was.per_zone.by_zone) | set(now.per_zone.by_zone)
    return all(now.per_zone.of(z) >= was.per_zone.of(z) for z in (*zones, None))


def fresh_holder(doc: BudgetDocument, request: SlotRequest, now: datetime) -> SlotDecision | None:
    """The decision for a request whose lifecycle holds the node and renewed it less than a third of its TTL
    ago: granted, with nothing to write. A drain renews at every step (every few seconds); writing each time
    would only make the shared document change faster and the acquirers conflict more. ``None`` when the
    renewal must be written, or an entry expired."""
    holder = doc.holder(request.node)
    if not _renewed_lately(holder, request, now) or _any_expired(doc, now):
        return None
    assert holder is not None
    if holder.seeded:
        return None  # its lifecycle's first ask since it was seeded: judged (see claim)
    live = prune(doc, now)
    # (judged on the pruned document, as claim judges it: the limits of an owner past LIMITS_RETENTION stay in the
    # document until the next write, and would keep this lifecycle's slot for a node that owner's claim keeps)
    if _claimed_elsewhere(live, request):
        return None  # (its slot is given up: see claim)
    return _decision(live, True, SlotReason.HELD)


def fresh_waiter(
    doc: BudgetDocument,
    request: SlotRequest,
    now: datetime,
    *,
    renewing: bool,
    asks_within: timedelta | None = None,
) -> SlotDecision | None:
    """The decision for a request whose lifecycle waits for the node, whose place needs no renewal yet (see
    :func:`_place_lasts`), and that still does not get a slot: denied, with nothing to write. Waiters retry every
    ``BudgetRetrySeconds``; writing each time would churn the shared document as much as the drains do.
    ``None`` when the request must be written (the entry needs its renewal, or it gets a slot now, or an
    entry expired). ``asks_within``: the longest the waiter waits before it asks again (None: not told)."""
    waiter = doc.waiter(request.node)
    if not _place_lasts(waiter, request, now, asks_within) or request.force or _any_expired(doc, now):
        return None
    assert waiter is not None
    if (waiter.in_progress, waiter.urgent_at) != (request.in_progress, request.urgent_at):
        return None  # its precedence changed: written now
    live = prune(doc, now)
    holder = doc.holder(request.node)
    if holder is not None:
        # waiting for its instance's other lifecycle to give the node's slot back: told so again, unwritten
        other = _of_other_lifecycle(holder, request)
        return _decision(live, False, SlotReason.HELD_BY_OTHER_LIFECYCLE) if other else None
    if any(w.node == request.node for w in eligible_waiters(live, now)):
        return None
    reason = SlotReason.LOST if renewing else SlotReason.NO_ROOM
    return _waiting(live, reason, request.node, now)


def queue_order(doc: BudgetDocument, now: datetime) -> list[Waiter]:
    """The live waiters in the order they would go (their place in line), for people and decisions: the
    replay's order as it stands now (the zone with the most work left counted once, at the start)."""
    work_left = Counter(w.zone for w in doc.waiters)
    return [
        w for _, w in sorted(enumerate(doc.waiters), key=lambda e: _precedence(e[1], now, work_left, e[0]))
    ]


def rivals_ahead(doc: BudgetDocument, mine: Waiter, before: Sequence[Waiter]) -> int:
    """Of the waiters ``before`` the waiter ``mine`` in line, those that may take the slot it needs: under its
    owner's per-zone limit, a node of a known zone waits for a slot of its zone, and those of another known
    zone take none of it (the line puts the zone with the most work left first: a node first for its own
    zone's slot may stand behind hundreds of another). Without a per-zone limit, all of them."""
    limits = doc.limits.get(mine.owner)
    if mine.zone is None or limits is None or limits.resolved.per_zone is None:
        return len(before)
    return sum(1 for w in before if w.zone in (None, mine.zone))


def rivals_room(doc: BudgetDocument, mine: Waiter) -> int:
    """The slots the rivals of the waiter ``mine`` (see :func:`rivals_ahead`) take turns in: its owner's total,
    and under a per-zone limit its zone's, whichever is less; at least 1. Not the holders now: right after a
    wave of releases, slots free but owed to the waiters ahead (another stack's, which take them at their own
    asks) hold nobody yet, and under another stack's stricter limits fewer are held than this owner's turn
    over. (Nodes counted as unavailable take some of them for longer: not told apart, as they may come back.)"""
    limits = doc.limits.get(mine.owner)
    if limits is None:
        return 1
    resolved = limits.resolved
    room = resolved.total
    if mine.zone is not None and resolved.per_zone is not None:
        room = min(room, resolved.per_zone.of(mine.zone))
    return max(1, room)


def _before(doc: BudgetDocument, node: str, now: datetime) -> tuple[Waiter, list[Waiter]]:
    """The waiter of ``node`` and the waiters that go before it (see :func:`queue_order`), found rather than
    sorted (every denied ask tells its place)."""
    work_left = Counter(w.zone for w in doc.waiters)
    keys = [(_precedence(w, now, work_left, i), w) for i, w in enumerate(doc.waiters)]
    mine, waiter = next((key, w) for key, w in keys if w.node == node)
    return waiter, [w for key, w in keys if key < mine]


def _any_expired(doc: BudgetDocument, now: datetime) -> bool:
    """Whether a holder or waiter of ``doc`` expired: its removal is written, by whoever asks first (a drain
    that died may leave a slot to a waiter, which the write wakes), even when that request has nothing to
    renew yet."""
    return any(entry.expired(now) for entry in doc.entries())


def _renewed_lately(
    entry: Holder | Waiter | None, request: SlotRequest, now: datetime, *, per_ttl: int = RENEWALS_PER_TTL
) -> bool:
    """Whether ``entry`` is this request's lifecycle's, renewed less than a third (``1 / per_ttl``) of its TTL ago."""
    return (
        entry is not None
        and (entry.owner, entry.record_id, entry.instance_id, entry.token)
        == (request.owner, request.record_id, request.instance_id, request.token)
        and now - entry.renewed_at < timedelta(seconds=entry.ttl_seconds) / per_ttl
    )


# A waiter's place is written again once it would expire within this many of its asks' longest interval: one ask
# late or lost by a whole interval (a delivery late, a container cold, the API server failing it) still finds it.
ASKS_A_PLACE_OUTLASTS = 2


def _place_lasts(
    entry: Holder | Waiter | None, request: SlotRequest, now: datetime, asks_within: timedelta | None
) -> bool:
    """Whether ``entry`` is this request's lifecycle's place in line, and lasts without a renewal. A place only has
    to outlast its waiter's next ask (a holder's slot is renewed a third of the TTL apart: its drain's polls may
    stall): with ``asks_within`` told, it is renewed once it would expire within ``ASKS_A_PLACE_OUTLASTS`` of those,
    and no sooner than a third of the TTL apart. At 2,000 waiters (a ConfigMap of some 800 KB) a renewal a third of
    the TTL apart (600 s) wrote the whole ConfigMap 8.3 times a second; so, 5.6 (the drain's cadence: a waiter asks
    at most 120 s apart; tests/unit/budget/test_waiter_renewal_churn)."""
    if _renewed_lately(entry, request, now):
        return True
    if asks_within is None or not _renewed_lately(entry, request, now, per_ttl=1):
        return False
    assert entry is not None
    return entry.expires_at - now > ASKS_A_PLACE_OUTLASTS * asks_within


def _without_other_instances(doc: BudgetDocument, request: SlotRequest) -> BudgetDocument:
    """``doc`` without another owner's holder or waiter of the request's node name for another instance: it
    is for a node gone with its instance, whose name the request's instance's node has now."""

    def stale(entry: Holder | Waiter) -> bool:
        return (
            entry.node == request.node
            and entry.owner != request.owner
            and entry.instance_id != request.instance_id
        )

    if not any(stale(h) for h in doc.holders) and not any(stale(w) for w in doc.waiters):
        return doc
    return doc.model_copy(
        update={
            "holders": tuple(h for h in doc.holders if not stale(h)),
            "waiters": tuple(w for w in doc.waiters if not stale(w)),
        }
    )


class Claimed(NamedTuple):
    doc: BudgetDocument
    decision: SlotDecision
    waited: timedelta | None  # how long the node had been waiting, when it is granted after waiting
    # The waiters eligible in ``doc``, when the claim replayed ``doc`` itself (an ask denied for lack of room):
    # the writer's wake-ups are judged on them, not on a second replay of the same document (a replay is most
    # of a write's CPU with hundreds of waiters, and a longer read-modify-write loses more races). None: not
    # replayed, or ``doc`` changed since (a grant).
    eligible: list[Waiter] | None = None
    # This owner's waiters that gave up their places in a full line for the request's node, a drain in progress or
    # near its global timeout (see _made_room): the caller tells and counts them
    shed: tuple[Waiter, ...] = ()


def claim(
    doc: BudgetDocument,
    request: SlotRequest,
    *,
    now: datetime,
    ttl: timedelta,
    renewing: bool,
    asked: datetime | None = None,
) -> Claimed:
    """Acquire or renew a slot for ``request``. ``doc`` must be pruned and carry the owner's current
    limits. ``asked``: when the request was made, which a new place in line dates from (see :func:`_queued`)."""
    ttl_seconds = int(ttl.total_seconds())
    renewal: dict[str, Any] = {
        "instance_id": request.instance_id,
        "zone": request.zone,
        "record_id": request.record_id,
        "token": request.token,
        "renewed_at": now,
        "ttl_seconds": ttl_seconds,
    }
    doc = _without_other_instances(doc, request)
    if any(_gave_back(r, request) for r in doc.released):
        return Claimed(doc, _decision(doc, False, SlotReason.RELEASED), None)
    holder = doc.holder(request.node)
    waiter = doc.waiter(request.node)
    seeded = None
    if (
        holder is not None
        and holder.seeded
        and (holder.owner, holder.record_id)
        == (
            request.owner,
            request.record_id,
        )
    ):
        # Seeded from its node (the ConfigMap created again), and asked for by its lifecycle for the first time
        # since: it may be a drain that had lost its slot and paused, which its node does not tell from the one
        # that took it. It keeps its slot (renewed below) when it fits beside every other holder, seeded or not,
        # under its owner's limits; otherwise it asks as a drain that lost its slot: in line (see Holder.seeded)
        others = doc.model_copy(update={"holders": tuple(h for h in doc.holders if h is not holder)})
        if not _fits_beside_holders(others, request):
            seeded, holder, doc = holder, None, others
    if holder is not None and holder.owner == request.owner and _claimed_elsewhere(doc, request):
        # The node was claimed by another stack that writes nothing here (see below) after this owner's slot was
        # granted for it: two stacks of separate budgets, each granted the node in its own, and the other's cordon
        # annotated it first. Its drain runs under its own budget: the slot held here for the node would only
        # count a drain that is not this owner's, so it is given up in this write (any waiter it makes eligible is
        # passed it by the write) and the node left alone
        doc = doc.model_copy(update={"holders": tuple(h for h in doc.holders if h is not holder)})
        return Claimed(doc, _decision(doc, False, SlotReason.CLAIMED_ELSEWHERE), None)
    if holder is not None:
        if holder.owner != request.owner:
            return Claimed(doc, _decision(doc, False, SlotReason.HELD_BY_OTHER_OWNER), None)
        if _of_other_lifecycle(holder, request):
            # Two lifecycles of one instance (a rebalance drain, then its terminate hook's): renewed under this
            # request, the holder would be released by whichever ended first while the other still drains, a
            # slot freed for another node over the budget. So it stays the first's. A forced request (a Spot
            # interruption: the capacity goes in two minutes) drains within the slot the node holds, without
            # renaming it (out of the line); the others wait for that drain, in line for the node, so that
            # the release of the holder wakes the one it makes eligible as it wakes any waiter. (A lifecycle
            # of another instance takes the holder over: the name was reused, the node of the old instance
            # is gone.)
            if request.force:
                doc = _without_waiter(doc, waiter, request)
                return Claimed(doc, _decision(doc, True, SlotReason.HELD), None)
            # (a node has one place in line: a third lifecycle of the instance leaves the second's, and asks
            # again at its retry)
            if waiter is None or (waiter.owner == request.owner and not _of_other_lifecycle(waiter, request)):
                queued = _queued(doc, request, waiter, renewal, now, asked)
                if queued is not None:
                    doc, _, shed = queued
                    decision = _decision(doc, False, SlotReason.HELD_BY_OTHER_LIFECYCLE)
                    return Claimed(doc, decision, None, shed=shed)
            return Claimed(doc, _decision(doc, False, SlotReason.HELD_BY_OTHER_LIFECYCLE), None)
        # (a seeded holder taken over by another instance's lifecycle: the node of the seeded one is gone)
        renewed = {**renewal, "seeded": False}
        holders = tuple(h.model_copy(update=renewed) if h is holder else h for h in doc.holders)
        doc = doc.model_copy(update={"holders": holders})
        return Claimed(doc, _decision(doc, True, SlotReason.HELD), None)

    if waiter is not None and waiter.owner != request.owner:
        return Claimed(doc, _decision(doc, False, SlotReason.CLAIMED_BY_OTHER_OWNER), None)
    if _claimed_elsewhere(doc, request):
        # (no entry of its owner here, and none of its limits: that owner keeps its holders elsewhere, and its
        # drain of the node may be alive there. A slot taken here would have its node adopted from under it)
        return Claimed(doc, _decision(doc, False, SlotReason.CLAIMED_ELSEWHERE), None)
    queued = _queued(doc, request, waiter, renewal, now, asked)
    if queued is None:
        return Claimed(doc, _decision(doc, False, SlotReason.QUEUE_FULL), None)
    doc, entry, shed = queued

    picks = _replay(doc, now)
    pick = next((fitting for w, fitting in picks if w.node == request.node), None)
    if pick is None and not request.force:
        reason = SlotReason.LOST if renewing else SlotReason.NO_ROOM
        decision = _waiting(doc, reason, request.node, now)
        return Claimed(doc, decision, None, [w for w, _ in picks], shed)

    forced = pick is None
    # (a seeded holder forced past the limits holds its slot as since its drain began)
    acquired_at = now if seeded is None else seeded.acquired_at
    granted = Holder(
        node=request.node, owner=request.owner, acquired_at=acquired_at, forced=forced, **renewal
    )
    passes = Counter(_passed_over(pick or (), entry, {request.node}))
    if pick is not None:
        passes.update(_crowded_out(doc, entry, {entry.node: entry.zone}, {w.node for w in pick}))
    doc = _with_holders(doc, (granted,), passes)
    reason = SlotReason.FORCED if forced else SlotReason.REACQUIRED if renewing else SlotReason.GRANTED
    waited = now - entry.waiting_since if waiter is not None else None
    return Claimed(doc, _decision(doc, True, reason), waited, shed=shed)


def _claimed_elsewhere(doc: BudgetDocument, request: SlotRequest) -> bool:
    """Whether ``request``'s node carries the claim of another stack that writes nothing in ``doc`` (see
    SlotRequest.claimed_by): its drain of the node may be alive under a budget of its own."""
    return request.claimed_by not in (None, request.owner) and request.claimed_by not in doc.limits


def _fits_beside_holders(doc: BudgetDocument, request: SlotRequest) -> bool:
    """Whether the request's node fits beside the holders of ``doc`` (and the unavailable nodes its owner
    counts) under its owner's limits, the line left aside."""
    limits = doc.limits[request.owner]
    taken = Occupancy({**counted_unavailable(doc, limits), **{h.node: h.zone for h in doc.holders}})
    return taken.admits(request.node, request.zone, limits.resolved)


def pass_on(doc: BudgetDocument, record_ids: Collection[str], owner: str, now: datetime) -> Passed:
    """``doc`` with the waiters of ``owner`` named by ``record_ids`` (eligible in ``doc``: those a write woke)
    holding slots, as their own asks would have made them, in the replay's order. ``doc`` pruned, with the
    owner's current limits.

    The writer that frees room grants it in the same write: the woken lifecycle then finds its slot held
    and writes nothing before it cordons (a read-modify-write of the shared document less, and none lost to
    a conflict, between a release and the next cordon: on a busy API server that write was most of the
    hand-over). A holder passed on keeps its waiter's renewal (never later than the pass: see
    ``Waiter.holding``), so one whose lifecycle stopped asking (it died) frees its slot when its place in line
    would have expired, not a whole TTL later; and it tells itself apart (:func:`passed_on`) until its
    lifecycle renews it."""
    wanted = set(record_ids)
    picks = [(w, fitting) for w, fitting in _replay(doc, now) if w.owner == owner and w.record_id in wanted]
    if not picks:
        return Passed(doc, ())
    taken = {w.node: w.zone for w, _ in picks}
    passes: Counter[str] = Counter()
    for waiter, fitting in picks:
        passes.update(_passed_over(fitting, waiter, taken))
        passes.update(_crowded_out(doc, waiter, taken, {w.node for w in fitting}))
    doc = _with_holders(doc, tuple(w.holding(acquired_at=now) for w, _ in picks), passes)
    return Passed(doc, tuple(w for w, _ in picks))


class Passed(NamedTuple):
    doc: BudgetDocument
    waiters: tuple[Waiter, ...]  # the waiters that hold a slot now, in the replay's order


def _passed_over(fitting: Iterable[Waiter], granted: Waiter, taken: Collection[str]) -> Iterator[str]:
    """The nodes of the waiters older than ``granted`` that would have fit at its pick (``fitting``), but for
    those granted too (``taken``): each is passed over once more."""
    return (w.node for w in fitting if w.node not in taken and w.waiting_since < granted.waiting_since)


def _with_holders(doc: BudgetDocument, holders: Sequence[Holder], passes: Counter[str]) -> BudgetDocument:
    """``doc`` with ``holders`` granted (their nodes out of the line) and the waiters they passed over
    counting ``passes`` more passes each."""
    taken = {h.node for h in holders}
    return doc.model_copy(
        update={
            "holders": (*doc.holders, *holders),
            "waiters": tuple(
                w.model_copy(update={"passed": w.passed + passes[w.node]}) if passes[w.node] else w
                for w in doc.waiters
                if w.node not in taken
            ),
        }
    )


def passed_on(doc: BudgetDocument, owner: str, *, at: datetime | None = None) -> list[Holder]:
    """The holders of ``owner`` a write granted (:func:`pass_on`; the write of time ``at``, when given) that
    have not renewed their slot since: perhaps never woken (a crash between the write and the wake-up, a
    wake-up lost). (A holder passed on keeps its waiter's renewal, older than the pass, until its lifecycle
    writes one; one woken that has not written yet is among them too: waking it again finds it moved on.)"""
    return [
        h
        for h in doc.holders
        if h.owner == owner and h.renewed_at < h.acquired_at and (at is None or h.acquired_at == at)
    ]


def mark_of(doc: BudgetDocument, node: str, owner: str, record_id: str) -> Released | None:
    """The mark of ``node``'s slot given back by lifecycle ``record_id`` of ``owner``, if it stands."""
    return next((r for r in doc.released if (r.node, r.owner, r.record_id) == (node, owner, record_id)), None)


def _gave_back(mark: Released, request: SlotRequest) -> bool:
    """Whether ``mark`` is of the request's lifecycle as it was when it gave its node's slot back: its node,
    record and token, and begun by then (a lifecycle started again since on the record, under the same token,
    is another)."""
    return (mark.node, mark.record_id, mark.token) == (request.node, request.record_id, request.token) and (
        request.since is None or request.since <= mark.released_at
    )


# A ConfigMap's creationTimestamp is to the second, and the clock of the API server that stamps it is not the
# clock that stamps a lifecycle's beginning (``SlotRequest.since``): a lifecycle that began this close after it
# is taken to have begun before it.
CREATION_MARGIN = timedelta(seconds=5)
# So too, for a renewal (a drain's poll, a refused cordon's retry), one that began up to this long after it: as far
# as any clock a stack runs on may be ahead of the API server's (see MAX_CLOCK_AHEAD). A function clock 7 s ahead
# stamped a lifecycle begun a second before the creation as begun after it, and a late poll of it over took its slot
# again, idle until the sweeper or its TTL freed it. A renewal is judged so only when it finds no slot of its own
# (taken again, or in line anew: after a re-creation, or its slot expired), rare on a drain's way, and a lifecycle
# begun after the creation costs one read of its record then. Not a first ask's grant, every drain's: its step reads
# the record for it (see unmarked), and a lifecycle that began within this of a ConfigMap's first install would pay.
# Not shrunk since the store tells the creation on the reader's clock (the API server's Date): that measures the
# reader's clock, not the intake's that stamped ``since`` (a stamp 5 min ahead is judged; the cost, a read per slot
# lost of a lifecycle begun within it, none per slot held: tests/unit/budget/test_renewal_creation_margin.py).
RENEWAL_CREATION_MARGIN = MAX_CLOCK_AHEAD
# The decisions that give the node a slot it did not hold (a renewal of its own holder is none)
_NEW_GRANTS = frozenset({SlotReason.GRANTED, SlotReason.REACQUIRED, SlotReason.FORCED})


def unmarked(doc: BudgetDocument, request: SlotRequest, decision: SlotDecision, *, renewing: bool) -> bool:
    """Whether ``decision``, judged on ``doc``, gives the request's node a new slot that ``doc`` cannot tell from
    a late delivery of a lifecycle that gave the slot back: the document was created (its ConfigMap deleted and
    created again) after the lifecycle began, so a mark of its release may have gone with the one before, and
    the seed cannot restore it (the cleanup clears the node's annotations). The lifecycle's record tells: the
    drain's first ask reads it for such a slot (AcquireSlot._gave_it_back), and gives the slot back for a
    lifecycle over. False when the store does not tell when ``doc`` was created (one that never loses it)."""
    if not decision.granted or decision.reason not in _NEW_GRANTS or doc.created_at is None:
        return False
    return _began_before(doc, request, RENEWAL_CREATION_MARGIN if renewing else CREATION_MARGIN)


def held_unmarked(doc: BudgetDocument, request: SlotRequest, decision: SlotDecision) -> bool:
    """Whether ``decision``, judged on ``doc`` for a first ask, renews a slot that the request's lifecycle holds
    in ``doc`` (not seeded: taken in it, or restored with it) though it began before ``doc`` was created. (The
    holder's times are not compared with the creation's: other clocks stamp them.) A redelivery of a late ask
    whose give-back failed (a 500, a 409 storm) after its unmarked grant landed finds that slot held, renewed
    lately, and the budget cannot tell it from a duplicate ask of a drain still running. Judged held and nothing
    more, it stood idle until the sweeper or its TTL freed it; the drain's first ask reads the record for it, as
    for an unmarked slot. (A renewal's slot is judged before it is written: see DisruptionBudget.renew.)"""
    if not decision.granted or decision.reason is not SlotReason.HELD or doc.created_at is None:
        return False
    holder = doc.holder(request.node)
    return (
        holder is not None
        and (holder.owner, holder.record_id) == (request.owner, request.record_id)
        and not holder.seeded
        and _began_before(doc, request, CREATION_MARGIN)
    )


def queued_unmarked(
    doc: BudgetDocument, request: SlotRequest, decision: SlotDecision, *, renewing: bool
) -> bool:
    """Whether ``decision``, judged on ``doc``, puts a request in line as a new waiter (a renewal that lost its slot,
    ``lost``; a first ask, ``no-room``), for a lifecycle that began before ``doc`` was created: as :func:`unmarked`'s
    slot, it cannot be told from a late delivery of a lifecycle that gave its slot back (a poll of a drain over, a
    duplicate of its first ask, whose mark went with the ConfigMap before). A first ask's place is judged within
    CREATION_MARGIN, as its grant is: every lifecycle's first ask takes one. A drain that lost its slot in ``doc``
    has its place in it already, renewed at its asks: not judged. One whose delivery tells it was paused in line
    before (``waiting_since``, its pause) is judged all the same: a late poll of a drain over may have read its
    record while the drain was paused, and as a drain in progress paused since before the ConfigMap went, it went
    first and was passed the next slot freed, held idle until its place's TTL. The record is read once per
    lifecycle and document created again (its place, once taken, is its own in ``doc``); a drain still running
    takes its place back (see SlotRequest.waiting_since)."""
    queued = SlotReason.LOST if renewing else SlotReason.NO_ROOM
    if decision.granted or decision.reason is not queued or doc.created_at is None:
        return False
    waiter = doc.waiter(request.node)
    mine = waiter is not None and (waiter.owner, waiter.record_id) == (request.owner, request.record_id)
    return not mine and _began_before(doc, request, RENEWAL_CREATION_MARGIN if renewing else CREATION_MARGIN)


def _began_before(doc: BudgetDocument, request: SlotRequest, margin: timedelta) -> bool:
    """Whether the request's lifecycle began before ``doc`` was created (within ``margin``; not told: taken so)."""
    assert doc.created_at is not None
    return request.since is None or request.since < doc.created_at + margin


def _of_other_lifecycle(entry: Holder | Waiter, request: SlotRequest) -> bool:
    """Whether ``entry`` is another lifecycle's of this owner, for the request's instance (one slot, one
    lifecycle: see :func:`claim`)."""
    return (
        entry.owner == request.owner
        and entry.record_id != request.record_id
        and entry.instance_id == request.instance_id
    )


def _queued(
    doc: BudgetDocument,
    request: SlotRequest,
    waiter: Waiter | None,
    renewal: dict[str, Any],
    now: datetime,
    asked: datetime | None = None,
) -> tuple[BudgetDocument, Waiter, tuple[Waiter, ...]] | None:
    """``doc`` with the request in line for its node: ``waiter`` (this owner's entry of the node, or None)
    renewed under it, or a new entry at the end; and that entry. None when a new one does not fit: the queue
    holds its maximum of waiters, or the document would grow too large.

    ``asked``: when the request was made, before its first write (None: ``now``). A new entry waits since then, and
    goes before the ones that joined since: under a storm of conflicting writes (409s), each read again and tried
    again after a jittered backoff, seconds in all, the line was in the order the writes won, not the asks came.

    A node kept out of a full line since before (its ``waiting_since``) takes the place of the youngest untouched
    waiter of its stack that came after it (see :func:`_made_room`): each place freed went to whichever node asked
    first, one that came an hour later included (first come, first served)."""
    precedence = {"in_progress": request.in_progress, "urgent_at": request.urgent_at}
    # (a drain in progress or a node near its global timeout is let in past the bounds, and takes the places of
    # untouched waiters of its stack: see _made_room)
    ahead = request.in_progress or (request.urgent_at is not None and now >= request.urgent_at)
    kept_out = waiter is None and len(doc.waiters) >= MAX_WAITERS and not (request.force or ahead)
    if kept_out and not _came_after(doc, request, now):
        return None
    if waiter is None:
        entry = Waiter(
            node=request.node,
            owner=request.owner,
            waiting_since=(
                min(request.waiting_since, now)
                if kept_out and request.waiting_since is not None
                else _joined(doc, request, now if asked is None else min(asked, now))
            ),
            **renewal,
            **precedence,
        )
        place = len(doc.waiters)
        while (
            (asked is not None or kept_out)
            and place
            and doc.waiters[place - 1].waiting_since > entry.waiting_since
            and (kept_out or (asked is not None and doc.waiters[place - 1].waiting_since >= asked))
        ):
            place -= 1  # (joined while this request's writes lost their races, or while it was kept out)
        waiters = (*doc.waiters[:place], entry, *doc.waiters[place:])
    else:
        entry = waiter.model_copy(update={**renewal, **precedence})
        waiters = tuple(entry if w is waiter else w for w in doc.waiters)
    queued = doc.model_copy(update={"waiters": waiters})
    if waiter is None and not request.force:
        if ahead or kept_out:
            made = _made_room(queued, entry, now, after=entry.waiting_since if kept_out else None)
            return None if made is None else (made[0], entry, made[1])
        if len(queued.to_json()) > MAX_DOCUMENT_BYTES:
            return None
    return queued, entry, ()


def _made_room(
    doc: BudgetDocument, entry: Waiter, now: datetime, *, after: datetime | None = None
) -> tuple[BudgetDocument, tuple[Waiter, ...]] | None:
    """``doc``, where the new waiter ``entry`` (a drain in progress that lost its slot, or a node near its global
    timeout) joined a line past its bounds, brought back under them by the youngest untouched waiters of its stack
    giving up their places (see :func:`shed`), and those; None when those are not enough (a line of other stacks' waiters, or
    of its own with precedence: it waits outside, as any node that finds the line full). A line at its maximum of
    untouched nodes in a refresh of thousands left such a drain outside it, asking again among the thousands, each
    place freed in the line going to whichever asked first, its node cordoned and half drained meanwhile
    (invariant 9). The waiters shed are told by the service (``BudgetQueueFull``) and ask again from outside.
    ``after``: only those that came after it (a node kept out of the line since then: see :func:`_queued`)."""
    candidates = [
        w
        for w in _youngest_first(doc, entry.owner, now)
        if w is not entry and not _ahead(w, now) and (after is None or w.waiting_since > after)
    ]
    over = len(doc.waiters) - MAX_WAITERS
    excess = len(doc.to_json()) - MAX_DOCUMENT_BYTES
    shed: list[Waiter] = []
    for waiter in candidates:
        if over <= 0 and excess <= 0:
            break
        shed.append(waiter)
        over -= 1
        excess -= BudgetDocument.entry_bytes(waiter)
    if over > 0 or excess > 0:
        return None
    gone = {id(w) for w in shed}
    return doc.model_copy(update={"waiters": tuple(w for w in doc.waiters if id(w) not in gone)}), tuple(shed)


def _came_after(doc: BudgetDocument, request: SlotRequest, now: datetime) -> bool:
    """Whether a node kept out of the full line since ``request.waiting_since`` finds an untouched waiter of its stack
    there that came after it, whose place it takes (see :func:`_queued`)."""
    since = request.waiting_since
    return since is not None and any(
        w.owner == request.owner and not w.in_progress and not _ahead(w, now) and w.waiting_since > since
        for w in doc.waiters
    )


def _ahead(waiter: Waiter, now: datetime) -> bool:
    """Whether ``waiter`` goes before the untouched nodes: a drain in progress, or a node near its global timeout."""
    return waiter.in_progress or (waiter.urgent_at is not None and now >= waiter.urgent_at)


def _youngest_first(doc: BudgetDocument, owner: str, now: datetime) -> list[Waiter]:
    """The waiters of ``owner`` not in progress, in the order they give up their places (see :func:`shed`): those
    not urgent yet before the urgent ones, the youngest first (the queue is in first-come order: the later of two
    that came at once is the younger)."""
    mine = [(i, w) for i, w in enumerate(doc.waiters) if w.owner == owner and not w.in_progress]
    mine.sort(
        key=lambda item: (
            item[1].urgent_at is not None and item[1].urgent_at <= now,
            -item[1].waiting_since.timestamp(),
            -item[0],
        )
    )
    return [w for _, w in mine]


def _joined(doc: BudgetDocument, request: SlotRequest, now: datetime) -> datetime:
    """Since when a new waiter of ``request`` waits in ``doc``'s line: now; or, for a lifecycle that waited in line
    before ``doc`` was created (its ConfigMap deleted and created again), since it began to wait. Its place went
    with the ConfigMap before (the nodes do not show waiters: the seed cannot restore them), and the replay orders
    the waiters of a class by their waiting since: joined as of now, it went behind every node that asked first
    after the re-creation, newcomers included (first come, first served). A waiter whose place expired in this
    document (it stopped asking for a TTL) joins at the end, as ever."""
    since = request.waiting_since
    if since is None or doc.created_at is None or since >= doc.created_at + CREATION_MARGIN:
        return now
    return min(since, now)


def shed(doc: BudgetDocument, owner: str, now: datetime) -> tuple[BudgetDocument, tuple[Waiter, ...]]:
    """``doc`` brought back under ``MAX_DOCUMENT_BYTES`` after a forced slot took it past (``doc`` itself when it
    is not past), by the youngest waiters of ``owner`` giving up their places in line; and those waiters.

    A forced slot is taken whatever the queue holds: its node goes either way, and its drain at least respects
    PodDisruptionBudgets, while a write past the API server's 1 MiB would fail, and fail every drain's write
    after it. In a scale-in longer than the actions' global timeouts, the nodes that found the queue full come
    back forced by the hundreds. So they take the places of the waiters of their own stack (never another's:
    invariant 3) that would go last: not those in progress (invariant 9), those not urgent yet before the
    urgent ones, the youngest first. A waiter shed asks again at its next retry, as a node that found the queue
    full; the caller counts and logs it."""
    excess = len(doc.to_json()) - MAX_DOCUMENT_BYTES
    if excess <= 0:
        return doc, ()
    shed: list[Waiter] = []
    for waiter in _youngest_first(doc, owner, now):
        if excess <= 0:
            break
        shed.append(waiter)
        excess -= BudgetDocument.entry_bytes(waiter)
    gone = {id(w) for w in shed}
    return doc.model_copy(update={"waiters": tuple(w for w in doc.waiters if id(w) not in gone)}), tuple(shed)


def _without_waiter(doc: BudgetDocument, waiter: Waiter | None, request: SlotRequest) -> BudgetDocument:
    """``doc`` without ``waiter`` when it is the request's lifecycle's (``doc`` itself otherwise)."""
    if waiter is None or (waiter.owner, waiter.record_id) != (request.owner, request.record_id):
        return doc
    return doc.model_copy(update={"waiters": tuple(w for w in doc.waiters if w is not waiter)})


def release(
    doc: BudgetDocument,
    node: str,
    owner: str,
    *,
    now: datetime,
    ttl: timedelta,
    record_id: str | None = None,
    token: str | None = None,
    by_its_lifecycle: bool = True,
) -> tuple[BudgetDocument, Holder | None, Waiter | None]:
    """Remove ``owner``'s holder and waiter of ``node`` (only those of ``record_id`` when given); returns
    the document and what was removed. ``doc`` must be pruned. Given back ``by_its_lifecycle`` (its cleanup),
    the holder's lifecycle may not take a slot again for a TTL; removed by another (the stop of its instance,
    the sweeper), it may: its drain may still be running, and must come to see for itself that it is over.
    Once it has (its cleanup, lifecycle ``record_id`` of ``token``, finds the slot of the node removed that
    way), it gets a mark of its own: a late delivery of one of its steps, whose commit loses, would otherwise
    take a slot that only the sweeper or the TTL gives back. So does any lifecycle of this owner cleaning up
    on the node while the removal's mark stands, since that mark names none."""

    def mine(entry: Holder | Waiter | None) -> bool:
        return (
            entry is not None and entry.owner == owner and (record_id is None or entry.record_id == record_id)
        )

    holder = doc.holder(node)
    holder = holder if mine(holder) else None
    waiter = doc.waiter(node)
    waiter = waiter if mine(waiter) else None
    # the lifecycle the node's mark of a slot given back names, (None, None) for none; None: no mark to write
    marked: tuple[str | None, str | None] | None = None
    if holder is not None:
        marked = (holder.record_id, holder.token) if by_its_lifecycle else (None, None)
    elif (
        by_its_lifecycle
        and record_id is not None
        and any((r.node, r.owner, r.record_id) == (node, owner, None) for r in doc.released)
    ):
        marked = (record_id, token)
    if holder is None and waiter is None and marked is None:
        return doc, None, None
    released = doc.released
    if marked is not None:
        tombstone = Released(
            node=node,
            owner=owner,
            record_id=marked[0],
            token=marked[1],
            released_at=now,
            ttl_seconds=int(ttl.total_seconds()),
        )
        # One per lifecycle of the node, and one of this owner's removals by another (no lifecycle). That one
        # stays when a lifecycle makes a mark its own: the mark does not tell which lifecycle's slot was
        # removed, and a cleanup of another (a lifecycle of the instance in line for the node) must leave
        # it to the one whose slot it was.
        released = (
            *(r for r in released if (r.node, r.owner, r.record_id, r.token) != (node, owner, *marked)),
            tombstone,
        )
    doc = doc.model_copy(
        update={
            "holders": tuple(h for h in doc.holders if h is not holder),
            "waiters": tuple(w for w in doc.waiters if w is not waiter),
            "released": released,
        }
    )
    return doc, holder, waiter


def force_release(doc: BudgetDocument, holder: Holder, now: datetime) -> BudgetDocument:
    """The operator's escape hatch: remove exactly ``holder`` (same node and record), whoever owns it.

    A removal by another, as the stop of the instance's: its mark names no lifecycle. So the node, still
    cordoned by a drain that may be stuck, counts as unavailable to an owner counting unavailable nodes, until
    someone uncordons it or that lifecycle gives it back (see :func:`counted_unavailable`); while the marks of
    the lifecycles that gave the node back before stay, and refuse their late deliveries. A drain still
    running takes a slot again at its next renewal when there is room, and otherwise pauses.
    """
    ttl = timedelta(seconds=holder.ttl_seconds)
    removed = release(
        doc, holder.node, holder.owner, now=now, ttl=ttl, record_id=holder.record_id, by_its_lifecycle=False
    )
    return removed[0]


def given_back(doc: BudgetDocument, request: SlotRequest, *, now: datetime, ttl: timedelta) -> BudgetDocument:
    """``doc`` (pruned) with the request's node marked given back by its lifecycle, as its cleanup's release
    marks it, and the lifecycle's entries of the node gone: for a late delivery of a lifecycle over, whose mark
    went with a ConfigMap deleted since (see ``SlotDecision.unmarked``), so that its next deliveries are refused
    by the document, as they were before."""
    doc, _, _ = release(
        doc, request.node, request.owner, now=now, ttl=ttl, record_id=request.record_id, token=request.token
    )
    mark = Released(
        node=request.node,
        owner=request.owner,
        record_id=request.record_id,
        token=request.token,
        released_at=now,
        ttl_seconds=int(ttl.total_seconds()),
    )
    key = (mark.node, mark.owner, mark.record_id, mark.token)
    released = (*(r for r in doc.released if (r.node, r.owner, r.record_id, r.token) != key), mark)
    return doc.model_copy(update={"released": released})


def refused(doc: BudgetDocument, reason: SlotReason) -> SlotDecision:
    """A request denied for ``reason`` on ``doc`` (a handed-off or late one: no place in line)."""
    return _decision(doc, False, reason)


def _decision(doc: BudgetDocument, granted: bool, reason: SlotReason) -> SlotDecision:
    return SlotDecision(
        granted=granted, reason=reason, holders=len(doc.holders), waiting=len(doc.waiters), position=None
    )


def _waiting(doc: BudgetDocument, reason: SlotReason, node: str, now: datetime) -> SlotDecision:
    """A denial of the waiter of ``node``, with its place in line and the rivals ahead of it."""
    mine, before = _before(doc, node, now)
    return SlotDecision(
        granted=False,
        reason=reason,
        holders=len(doc.holders),
        waiting=len(doc.waiters),
        position=1 + len(before),
        ahead=rivals_ahead(doc, mine, before),
        room=rivals_room(doc, mine),
    )
