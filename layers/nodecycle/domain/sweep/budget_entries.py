"""The sweep of the disruption budget: this owner's entries whose instance is gone, or whose lifecycle is over
(a node gone is read as a reason to read its lifecycle again, not as a drain over)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from datetime import datetime

from nodecycle.domain.budget import Holder, Verdict, Waiter
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.budget import SweepableBudget
from nodecycle.domain.ports.lifecycle import RecordStore
from nodecycle.domain.sweep.shared_owner import Foreign, OtherStacks, lifecycle_over
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, SweepFailed, failed_item, listed_or_none

log = logging.getLogger(__name__)


class StaleBudgetEntries:
    """Budget entries of this owner whose instance is gone, or whose lifecycle is over (its record read again when
    its node is missing)."""

    def __init__(
        self,
        *,
        budget: SweepableBudget,
        records: RecordStore,
        node_names: Callable[[], set[str]],
        alive_instances: Callable[[Collection[str]], set[str]],
        waker: Dispatcher,
        nodes_now: Callable[[Collection[str]], set[str]] | None = None,
        others: OtherStacks | None = None,
    ) -> None:
        """``node_names`` lists the nodes, perhaps from a cache behind them; ``nodes_now`` tells which of the nodes
        missing there are nodes now, each read again (None: the list is the nodes as they are); ``others`` tells
        an entry whose lifecycle is missing from the records that another stack of this owner id holds (None: the
        lifecycle of every such entry is over)."""
        self._others = others
        self._budget = budget
        self._records = records
        self._node_names = node_names
        self._nodes_now = nodes_now
        self._alive = alive_instances
        self._waker = waker

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        # (the token each is open under: a record of a disruption starts over under another token, and an entry
        # of the lifecycle before, whose release was lost, is of a lifecycle that is over)
        open_ids = {record.id: record.token for record in listed_or_none(open_records, "budget")}
        unread: list[str] = []
        unasked: list[str] = []  # what could not be asked: the nodes' list, EC2
        foreign: dict[str, Foreign] = {}  # another stack's, of this owner id: kept (see shared_owner)
        unjudged = 0

        def stale(entries: Sequence[Holder | Waiter]) -> Verdict:
            # One node list and one batched instance check for all the entries judged: EC2 is asked about
            # exactly their instances (a lifecycle that started after the sweep's snapshot of open records
            # holds a slot too, and its instance is alive). The records are read one by one, each retried when
            # throttled: a read starts only while time is left, and an entry not judged is kept for the next
            # sweep (the write of what was judged comes within the reserve), and passed no slot.
            nonlocal unjudged
            nodes = self._nodes(entries, unasked)
            alive = self._asked(
                "ask EC2 about the instances", lambda: self._alive({e.instance_id for e in entries}), unasked
            )
            doomed: set[str] = set()
            unsure: set[str] = set()
            for entry in entries:
                # An instance known gone is gone, whatever else tells it; a source that could not be asked tells
                # nothing, and the entry is judged by the others (its lifecycle's record last). A node missing
                # is not a drain over: a Node object deleted while its instance runs (kubectl delete node) leaves
                # its pods bound to its name, running until the pod garbage collector force-deletes them (40 s
                # later), and its drain evicts them under this slot (drain/orphans.py). Freed, the slot went to
                # the next node while they were evicted (invariant 1). Its lifecycle's record is read again
                # instead (the snapshot may lag behind its end): swept when over; else its drain, which finds
                # the node gone at its next poll, releases it (or its TTL ends it, for a drain that stalled).
                node_missing = nodes is not None and entry.node not in nodes
                if alive is not None and entry.instance_id not in alive:
                    doomed.add(entry.record_id)  # (no record read needed)
                elif (
                    not node_missing
                    and entry.record_id in open_ids
                    and entry.token in (None, open_ids[entry.record_id])
                ):
                    continue  # (an entry of no token: written before entries carried one, not told apart)
                elif not time.enough():
                    unjudged += 1
                    unsure.add(entry.record_id)
                elif self._over(entry, unread, foreign):
                    doomed.add(entry.record_id)
                elif entry.record_id in unread:
                    unsure.add(entry.record_id)
            return Verdict(stale=frozenset(doomed), unjudged=frozenset(unsure))

        result = self._budget.sweep(stale=stale)
        unwoken = unsent = 0
        for waiting in result.wake:
            # The slots are written as the waiters' already: their wake-ups finish that write, and may take the
            # time held back for the parts after this one (see SweepTime.enough_to_finish)
            if not time.enough_to_finish():
                unsent += 1  # (each waiter has its own backoff message)
                continue
            try:
                self._waker.wake(waiting)
            except Exception:
                # One wake-up SQS refuses must not keep the other waiters from a freed slot; that waiter
                # still has its own backoff message. The sweep fails once all were tried.
                failed_item(log, "could not wake waiter %s for a freed budget slot", waiting)
                unwoken += 1
        failures = [f"could not {what} (the entries were judged without)" for what in unasked]
        if unread:
            failures.append(f"could not read the lifecycles of {len(unread)} budget entries (kept)")
        if unwoken:
            failures.append(f"could not wake {unwoken} waiters (the others were woken)")
        if foreign and self._others is not None:
            refusal = self._others.refusal(foreign, "budget entries")
            log.error("%s", refusal)
            failures.append(str(refusal))
        if unsent or unjudged:
            undone = [f"{unjudged} budget entries not judged (kept)"] if unjudged else []
            undone += [f"{unsent} waiters not woken"] if unsent else []
            raise time.cut_short("; ".join([*undone, *failures, "the entries judged stale were swept"]))
        if failures:
            raise SweepFailed(f"{'; '.join(failures)}; the other entries were swept")
        return {"SweptHolders": len(result.holders), "SweptWaiters": len(result.waiters)}

    def _nodes(self, entries: Sequence[Holder | Waiter], unasked: list[str]) -> set[str] | None:
        """The nodes, as far as the entries' are concerned (None: not known). A node missing from the list is read
        again before its entry's lifecycle is: the Kubernetes adapter lists the nodes with resourceVersion=0, from
        the API server's watch cache, which may lag behind etcd (seconds under load) and miss a node registered
        moments before its drain took a slot. (Judged gone by the list alone, that slot was freed while its drain
        evicted, and granted to the next node: invariant 1.) The lifecycles' records are read again so
        (lifecycle_over), for the index's lag. Unread, the missing nodes tell nothing: the entries are judged
        without the nodes."""
        listed = self._asked("list the nodes", self._node_names, unasked)
        if listed is None or self._nodes_now is None:
            return listed
        missing = {entry.node for entry in entries} - listed
        if not missing:
            return listed
        ask = self._nodes_now
        now = self._asked("read again the nodes missing from the list", lambda: ask(missing), unasked)
        return None if now is None else listed | now

    @staticmethod
    def _asked[T](what: str, ask: Callable[[], T], unasked: list[str]) -> T | None:
        """What ``ask`` answers; None when it fails (the API server or EC2 refused, throttled past the client's
        retries), noted in ``unasked``: the entries are judged by what the other sources tell, the part fails
        once the budget is swept. (Before, one refusal failed the whole part: holders whose node was gone, or
        whose lifecycle was over, kept their slots until their TTL.)"""
        try:
            return ask()
        except Exception:
            failed_item(log, "could not %s for the budget sweep: judged without", what)
            unasked.append(what)
            return None

    def _over(self, entry: Holder | Waiter, unread: list[str], foreign: dict[str, Foreign]) -> bool:
        """Whether the entry's lifecycle is over: its record finished or gone, or started over under another
        token (the entry's lifecycle is done with, its release lost; an entry of no token, written before entries
        carried one, is not told apart). A record missing whose instance lives in a group of another stack's is that
        stack's lifecycle (it shares this owner id): kept, noted in ``foreign``, and the part fails naming it. One
        record DynamoDB will not read (throttled past the client's retries) keeps its entry, which may be live, and
        must not keep the others from the sweep: noted in ``unread``, and the part fails once the budget is swept."""
        try:
            over = lifecycle_over(
                self._records,
                entry.record_id,
                entry.token,
                others=self._others,
                instance_id=entry.instance_id,
                node=entry.node,
            )
            if isinstance(over, Foreign):
                foreign[entry.record_id] = over
                return False
            return over
        except Exception:
            failed_item(
                log,
                "could not read lifecycle %s of the budget entry of %s: kept",
                entry.record_id,
                entry.node,
            )
            unread.append(entry.record_id)
            return False
