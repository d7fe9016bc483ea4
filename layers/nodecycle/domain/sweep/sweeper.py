"""The sweeper: what repairs a crash that redelivery alone cannot.

Every few minutes, for this owner only, each part of the sweep (this package) runs over the open
lifecycles:

- :mod:`.lifecycles`: lifecycles whose next step is long overdue (their message was lost) are resumed; one
  whose action is near its global timeout is completed right here, so invariant 2 holds even when the work
  queue is stuck;
- :mod:`.orphans`: actions of this stack's hooks that hold an instance with no record (their event was
  dead-lettered or never delivered) are kept alive, then adopted through intake's path;
- :mod:`.budget_entries`: budget holders and waiters whose instance is gone, or whose lifecycle is over (read
  again when their node is gone), are removed;
- :mod:`.annotations`: nodes left with this owner's annotations by a lifecycle that is over get them cleared;
- :mod:`.addresses`: addresses left unassociated past the sweep grace are released.

Each part runs even when another fails, and within a part each lifecycle, node, waiter or address is handled
even when one before it fails; a failure is logged with its cause and re-raised at the end, so the invocation
counts as failed. A call AWS refuses to the sweeper's role (``AccessRefused``: the role narrowed, a service control
policy's explicit deny) is no bug and fails every item that needs it alike: logged without a traceback where it is met
(:func:`failed_item`), and told once per part and sweep, as an error naming the part, the call, the code, AWS's words
(which name the principal) and how many times it was met, and counted (``SweepPartsRefused{part}``). A transient
failure of the cluster or AWS (``TransientError``: the API server's 500 "etcdserver: request timed out", throttling
past the client's retries) is no bug either, and passes by itself: one line where it is met, then one warning for the
part naming it and how often, counted (``SweepPartsUnavailable{part}``), not a traceback at every sweep.

Each part works within the invocation's time (:mod:`.sweep_time`): it starts another item only while more than
a reserve is left (:mod:`.order`). First of all, the open actions at their last chance are settled
(:meth:`.lifecycles.LifecycleRepair.last_chances`, a share held back for the orphans'): the settlement point reckons
the sweep to reach them as it starts, and after a long part before them (the orphans', minutes with a backlog) they
were reached past their global timeout. Then the heartbeats that keep actions alive. The orphans' first (a share held
back for the lifecycles'): an orphan's heartbeat is due at every sweep, and no record tells how near its
hook's timeout is (its first sighting may come just before it); an open lifecycle's is taken two intervals
ahead, so one this sweep did not reach is reached by the next, most urgent first. Then the lifecycles (those the
first part did not reach), the orphans' adoptions (several calls each: after every heartbeat), and the rest. A part that stops for want
of time fails the sweep like a part that fails (logged, ``SweepsCutShort``, the sweeper's dead-letter alarm):
the actions it did not reach may be near their timeout, and the next sweep takes them up. The open lifecycles are listed when a part first needs them: a listing DynamoDB refuses
(denied, throttled past the client's retries) fails the lifecycles' part, not the address sweep; the orphans'
keep-alive then heartbeats every action held, adopting none, and the budget's and annotations' parts read each
lifecycle's record instead (:func:`listed_or_none`).

The listing comes from a global secondary index, which lags the table: a record just written may be missing from
it, one just closed still listed, a listed one an older version. What is missing is never taken as absent (the
budget's and annotations' parts read the record of what the listing does not show; an action held with no
listed record is kept alive, then its claim read before it counts as an orphan, and adopted only through intake's
path, which finds the claim; one so found open is repaired by the lifecycles' part as a listed one, see
:class:`OpenLifecycles`); what is listed is
read again, consistently, before a part acts on it or counts it (the lifecycles' part, :meth:`LifecycleRepair
._as_it_is`), and nothing is freed of a lifecycle listed open until a listing no longer shows it.

A sweep may start late: EventBridge delivers the schedule late (the sweeper throttled at its reserved concurrency
of one while a long sweep runs: the event is retried), or the sweep before failed and the next is the retry. The
sweep then says how late it is (``SweepLateSeconds``; ``SweepsLate`` past its schedule's minute, or a heartbeat margin
if longer: its alarm, since an action whose hook has the shortest heartbeat timeout allowed may lapse then), and each part is told (``SweepTime.late``):
the next sweep may come as late, so what that one would reach too late is done now (see :mod:`.lifecycles`).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Protocol, overload

from nodecycle.domain.errors import AccessRefused, TransientError
from nodecycle.domain.model import LifecycleRecord
from nodecycle.domain.ports.lifecycle import RecordStore
from nodecycle.domain.ports.runtime import Clock, Metrics
from nodecycle.domain.sweep.sweep_time import RESERVE, OutOfTime, SweepEnd, SweepTime

log = logging.getLogger(__name__)
# How far ahead of the sweeper's clock a schedule time may be and still be the schedule's (EventBridge's clock and
# Lambda's differ by milliseconds); one further ahead is not remembered as a tick swept (see Sweeper._lateness)
TICK_AHEAD = timedelta(seconds=60)

Counts = dict[str, int]

# The refusals met by the part that runs, for the sweeper to tell once (see failed_item); None outside a sweep's part
_REFUSALS: ContextVar[list[AccessRefused] | None] = ContextVar("sweep_refusals", default=None)
# Likewise the transient failures (a 5xx, throttling past the client's retries) met by the part that runs
_UNAVAILABLE: ContextVar[list[TransientError] | None] = ContextVar("sweep_unavailable", default=None)


def failed_item(logger: logging.Logger, message: str, *args: object) -> None:
    """Log the failure being handled (call it in an ``except`` block) of one item of a part, which goes on with the
    others: with its traceback; but a call AWS refused to the role (``AccessRefused``) in one line, kept for the
    sweeper to tell once for the part (a denial fails every item that needs the call: a traceback each, every sweep,
    buried the refusal's words)."""
    error = sys.exc_info()[1]
    if isinstance(error, AccessRefused):
        logger.warning(message + ": %s", *args, error)
        refusals = _REFUSALS.get()
        if refusals is not None:
            refusals.append(error)
        return
    if isinstance(error, TransientError):  # (the server's or AWS's failure for now: its words say it all)
        logger.warning(message + ": %s", *args, error)
        unavailable = _UNAVAILABLE.get()
        if unavailable is not None:
            unavailable.append(error)
        return
    logger.exception(message, *args)


class SweepPart(Protocol):
    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts: ...


class SweepFailed(Exception):
    """At least one part of a sweep failed, or stopped for want of time; the others ran."""


class Sweeper:
    def __init__(
        self,
        *,
        owner: str,
        records: RecordStore,
        clock: Clock,
        metrics: Metrics,
        parts: Mapping[str, SweepPart],
        shares: Mapping[str, timedelta],
        reserve: timedelta = RESERVE,
        fresh: Sequence[Callable[[], None]] = (),
        late_after: timedelta | None = None,
    ) -> None:
        """``parts`` run in their order; ``shares``: the time held back for a part from the parts before it;
        ``fresh``: called as each sweep begins, so that what the parts share within a sweep (a listing) is
        not carried into the next; ``late_after``: how late a sweep may start before it counts as late (the
        schedule's minute, or the heartbeat margin if longer: ``Timing.sweep_lateness_seconds``), None: never counted."""
        self._owner = owner
        self._records = records
        self._clock = clock
        self._metrics = metrics
        self._parts = parts
        self._shares = shares
        self._reserve = reserve
        self._fresh = fresh
        self._late_after = late_after
        # The schedule time of the last tick this container swept: a second delivery of it is no late sweep
        self._swept_tick: datetime | None = None

    def sweep(self, time_left: Callable[[], float], scheduled_at: datetime | None = None) -> Counts:
        """Run the parts within ``time_left`` (seconds, the invocation's). ``scheduled_at``: when the schedule
        fired this sweep (its event's time), None for a sweep invoked by hand."""
        for forget in self._fresh:
            forget()
        now = self._clock.now()
        late = self._lateness(now, scheduled_at)
        open_records = OpenLifecycles(lambda: self._records.open_records(self._owner))
        report: Counts = {}
        failed: list[str] = []
        refused: list[str] = []  # (the parts AWS refused calls to: named in the failure)
        cut_short: list[str] = []
        names = list(self._parts)
        end = SweepEnd()  # (the sweep's end, when a part sets one: every part after it keeps to it)
        for index, (name, part) in enumerate(self._parts.items()):
            shares = [self._shares.get(after, timedelta()) for after in names[index + 1 :]]
            later = sum(shares, timedelta())
            next_share = shares[0] if shares else timedelta()  # (the part right after this one)
            time = SweepTime(
                time_left, self._reserve, held_back=later, late=late, end=end, next_share=next_share
            )
            refusals: list[AccessRefused] = []
            transients: list[TransientError] = []
            met = _REFUSALS.set(refusals)
            met_transient = _UNAVAILABLE.set(transients)
            try:
                if not time.enough():
                    raise time.cut_short("not started")
                report |= part(open_records, now, time)
            except OutOfTime as error:
                log.error("sweep part %s stopped for want of time: %s", name, error)
                cut_short.append(name)
            except AccessRefused as error:  # (the part's own call, not an item's: told below)
                refusals.append(error)
                failed.append(name)
            except TransientError as error:  # (likewise: the cluster's or AWS's failure for now, told below)
                transients.append(error)
                failed.append(name)
            except SweepFailed as error:  # (a part's account of its items, each logged as it failed)
                log.error("sweep part %s failed: %s", name, error)
                failed.append(name)
            except Exception:  # isolate the parts: log it whole here, fail the sweep at the end
                log.exception("sweep part %s failed", name)
                failed.append(name)
            finally:
                _REFUSALS.reset(met)
                _UNAVAILABLE.reset(met_transient)
            if refusals:
                refused.append(name)
                self._tell_refused(name, refusals)
            if transients:
                self._tell_unavailable(name, transients)
        if open_records.listed is not None:
            report = {"OpenLifecycles": open_records.open_count()} | report
        if scheduled_at is not None:
            report = {"SweepLateSeconds": int(late.total_seconds())} | report
        if cut_short:
            self._metrics.count("SweepsCutShort")
        log.info("sweep done", extra={"sweep": report})
        if failed or cut_short:
            causes = [f"sweep parts failed: {', '.join(failed)}"] if failed else []
            if refused:
                causes.append(f"AWS refused calls to the sweeper's role in: {', '.join(refused)}")
            if cut_short:
                causes.append(f"cut short for want of time: {', '.join(cut_short)} (the next sweep goes on)")
            raise SweepFailed(f"{'; '.join(causes)} (the others ran)")
        return report

    def _tell_refused(self, part: str, refusals: Sequence[AccessRefused]) -> None:
        """Tell the refusals one part met, once for each call and code: an error naming the part, the call, the code,
        AWS's words (the principal refused and by what) and how often; counted once for the part."""
        by_call: dict[tuple[str, str], list[AccessRefused]] = {}
        for refusal in refusals:
            by_call.setdefault((refusal.call, refusal.code), []).append(refusal)
        for (call, code), met in by_call.items():
            log.error(
                "sweep part %s: AWS refused the sweeper's role %s (%s), %d times: %s; tried again at the next sweep "
                "(lift the denial: the role's policy, a service control policy, a permissions boundary)",
                part,
                call,
                code,
                len(met),
                met[0],
            )
        self._metrics.count("SweepPartsRefused", part=part)

    def _tell_unavailable(self, part: str, met: Sequence[TransientError]) -> None:
        """Tell the transient failures one part met (the API server's 5xx, throttling past the client's retries), once:
        a warning naming the part, the first failure's words and how often; counted once for the part."""
        log.warning(
            "sweep part %s: the cluster or AWS failed for now, %d times: %s; tried again at the next sweep",
            part,
            len(met),
            met[0],
        )
        self._metrics.count("SweepPartsUnavailable", part=part)

    def _lateness(self, now: datetime, scheduled_at: datetime | None) -> timedelta:
        """How long after its schedule this sweep started (none ahead of it: the clocks differ by milliseconds),
        counted and logged when past ``late_after``. Nothing for a second delivery of a tick this container swept
        already (EventBridge delivers at least once; at the reserved concurrency of one the duplicate runs once
        the first sweep ends): the tick was swept on time, and reckoned from it the duplicate would count the
        first sweep's length as lateness (``SweepsLate``, its alarm) and settle stalled actions that much sooner
        than their last chance. (A cold start forgets the tick: a duplicate then counts late, as before.) A time
        ahead of this clock by more than TICK_AHEAD is no schedule's (an invocation by hand with a time of its own,
        copied from a clock that runs ahead or edited): not remembered, or every tick up to it would pass for one
        swept already, its lateness neither counted nor allowed for."""
        if scheduled_at is None:
            return timedelta()
        swept = self._swept_tick
        if scheduled_at <= now + TICK_AHEAD:
            self._swept_tick = max(scheduled_at, swept or scheduled_at)
        if swept is not None and scheduled_at <= swept:
            log.info("the sweep scheduled at %s was run already: a second delivery", scheduled_at.isoformat())
            return timedelta()
        late = max(now - scheduled_at, timedelta())
        if self._late_after is not None and late > self._late_after:
            log.warning(
                "the sweep scheduled at %s started %d s late: actions may have lapsed since the last sweep; "
                "it keeps alive and settles what a next sweep as late would reach too late",
                scheduled_at.isoformat(),
                late.total_seconds(),
            )
            self._metrics.count("SweepsLate")
        return late


class OpenLifecycles(Sequence[LifecycleRecord]):
    """The open lifecycles of the owner, listed on first use and kept for the rest of the sweep. A listing that
    fails raises in the part that asked, and the next part that asks lists them again.

    The listing comes from an index that lags (see the module): what a part finds by a consistent read is told
    here, for the parts after it and the report. A lifecycle missing from the listing whose record a part read
    open (:func:`found_unlisted`: the orphans' probe, reading the claim of an action held with no listed
    lifecycle) is one of them from then on, after the listed ones: the lifecycles' part repairs it (resumes it,
    settles it at its last chance) as any listed one, where it would otherwise only be kept alive by the probe
    for as long as the index lags, up to its global timeout with nobody completing it. A listed one whose record
    a part read over (:func:`found_over`) stays in the list (the parts that free what a lifecycle holds free
    nothing of one listed open), but is not counted open in the report."""

    def __init__(self, listing: Callable[[], Iterable[LifecycleRecord]]) -> None:
        self._listing = listing
        self.listed: list[LifecycleRecord] | None = None
        self._unlisted: dict[str, LifecycleRecord] = {}
        self._over: set[str] = set()

    def _records(self) -> list[LifecycleRecord]:
        if self.listed is None:
            self.listed = list(self._listing())
        return self.listed + list(self._unlisted.values())

    def found_unlisted(self, record: LifecycleRecord) -> None:
        if self.listed is not None and all(listed.id != record.id for listed in self.listed):
            self._unlisted[record.id] = record
        self._over.discard(record.id)

    def found_over(self, record_id: str) -> None:
        self._over.add(record_id)

    def open_count(self) -> int:
        """The lifecycles open as far as this sweep knows: listed or found unlisted, less those found over. (One
        closed within the index's lag whose listed version called for nothing is not read, and still counted:
        the next listing drops it.)"""
        return len({record.id for record in self._records()} - self._over)

    def __len__(self) -> int:
        return len(self._records())

    def __iter__(self) -> Iterator[LifecycleRecord]:
        return iter(self._records())

    @overload
    def __getitem__(self, index: int) -> LifecycleRecord: ...
    @overload
    def __getitem__(self, index: slice) -> list[LifecycleRecord]: ...
    def __getitem__(self, index: int | slice) -> LifecycleRecord | list[LifecycleRecord]:
        return self._records()[index]


def found_unlisted(open_records: Sequence[LifecycleRecord], record: LifecycleRecord) -> None:
    """Tell the sweep's open lifecycles of ``record``, read open though the listing did not show it."""
    if isinstance(open_records, OpenLifecycles):
        open_records.found_unlisted(record)


def found_over(open_records: Sequence[LifecycleRecord], record_id: str) -> None:
    """Tell the sweep's open lifecycles that the listed ``record_id`` was read over."""
    if isinstance(open_records, OpenLifecycles):
        open_records.found_over(record_id)


def listed_or_none(open_records: Sequence[LifecycleRecord], part: str) -> Sequence[LifecycleRecord]:
    """The open lifecycles, for a part that reads a lifecycle's record (:func:`.shared_owner.lifecycle_over`) before
    it removes anything of it and needs the list only to spare those reads; none when DynamoDB will not list them (its
    Query denied, a key disabled, throttled past the client's retries), logged. The part then reads the record
    of each entry or node it judges: a GetItem may answer where the index's Query does not (a policy names the
    index apart), and what is over is freed rather than kept, sweep after sweep, for want of the list. The
    parts that cannot do without the list (the lifecycles', the orphans') fail the sweep."""
    try:
        return list(open_records)
    except Exception:  # (whatever kept DynamoDB from listing them: logged whole)
        failed_item(
            log, "could not list the open lifecycles: the %s part reads each lifecycle's record", part
        )
        return []


def record_over(record: LifecycleRecord | None, token: str | None = None) -> bool:
    """Whether a lifecycle whose record reads ``record`` (None: missing) is over (see
    :func:`.shared_owner.lifecycle_over`)."""
    # (a token the lifecycle went by before its maintenance was moved earlier is its own: see LifecycleRecord.goes_by)
    return record is None or record.finished or (token is not None and not record.goes_by(token))
