"""The sweep of lifecycles: resume those whose message was lost; settle those near their global timeout."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nodecycle.domain.catalog import LifecycleHooks
from nodecycle.domain.completion import CompleteAction, NotCalled
from nodecycle.domain.eip.wake import waits_in_line
from nodecycle.domain.engine import (
    Dispatcher,
    Outcome,
    action_lapsed,
    advance,
    claim_recorded,
    claimed_for_completion,
    completion_in_progress,
    confirmed_near_its_timeout,
    gone_counted,
    landed_after_all,
    moved_on,
    settled_elsewhere_counted,
)
from nodecycle.domain.errors import AccessRefused, NotYetHeld, TransientError
from nodecycle.domain.flow import completed_first
from nodecycle.domain.model import EXPIRY_UNTOLD, ActionRef, LifecycleRecord, Step, adopted_token
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.lifecycle import Autoscaling, RecordStore
from nodecycle.domain.ports.runtime import Clock, Metrics
from nodecycle.domain.sweep.sweep_time import SweepTime
from nodecycle.domain.sweep.sweeper import Counts, SweepFailed, failed_item, found_over

log = logging.getLogger(__name__)

# A lifecycle resumed this often in a row without a step committing is stuck: failing for a reason a resend
# alone will not fix (a poison step, a function failing at init). It is reported (the alarm), and re-sent
# less often: after 2, 4, 8 sweep intervals, then every STUCK_BACKOFF_CAP. Never given up on, since the cause
# may be fixed meanwhile (the function's setting, the cluster's access) and nothing else would send its step
# again: its messages were dead-lettered, and its action would be completed undrained at its global timeout.
MAX_RESUMES = 5
STUCK_BACKOFF_CAP = 12  # sweep intervals (an hour at the default 5 minutes)

# record.extra key: a sweep's settlement counted this action near its global timeout (GlobalTimeoutsNear, a page:
# once per action). Written with its claim and kept once the claim is gone (withdrawn after a refused call,
# recorded by the engine's retry of a throttled completion, taken over by the engine's claim), so that a sweep that
# settles the action again does not count it again.
NEAR_GLOBAL_TIMEOUT = "near_global_timeout"


class LifecycleRepair:
    """Keep open actions alive, resume lifecycles whose message was lost, settle those near their global
    timeout.

    Keeping alive: the step engine heartbeats an action as its steps run, but when the work queue stalls (the
    function throttled, failing at init, a poison batch) no step runs, and Auto Scaling would apply the
    hook's default result to an undrained node at the heartbeat timeout. So every open action whose
    heartbeat deadline falls before the next sweep (plus the margin) gets a heartbeat here, up to its global
    timeout: a stall costs time, never an undrained termination. An overdue one counts as stalled
    (``LifecyclesStalled``: the alarm).

    "The next sweep" is reckoned two intervals away, not one: sweeps run one at a time (the function's
    reserved concurrency is 1), so a sweep slowed down by the very faults that stalled the queue (throttling,
    5xx) pushes the next one back. Seen in the fault campaign: a 12 s sweep under AWS error storms delayed the
    next by 10 s and an action ran out (seed 5, scenario 211). The cost is at most one heartbeat per open
    action per sweep. Under an interval shorter than the sweep's 300 s timeout (SweepIntervalMinutes 1 to 4), this
    sweep may itself outlast an interval and push the next one back further: by its overrun (``_overrun``), which
    the heartbeats allow for as they allow for lateness (below), and a stalled action's last chance too
    (``_runs_past_its_last_chance``).

    A sweep that started late (``SweepTime.late``: its schedule delivered late, or the sweep before failed) may
    find actions that ended meanwhile, and the next sweep may come as late. So:

    - an action whose heartbeat deadline (or global timeout) the record shows past is asked about (a heartbeat)
      even in the last margins before its global timeout, where it would otherwise be completed without one:
      gone, and not at its completion (no completion of ours was asked), it expired by Auto Scaling's timeout,
      with the hook's default result, and is recorded and counted so (``LifecycleActionsExpired``: its alarm;
      ``LifecyclesExpired`` in the report), not as settled by the sweeper with its "settled elsewhere" answer. A
      drain its cleanup may carry over to the action its instance's hook holds (EXPIRY_UNTOLD: a crossed
      lifecycle) has its expiry told by that cleanup, as expired or carried over: the report counts it apart
      (``LifecyclesExpiryUntold``), as the metrics page nothing for it yet;
    - its horizons move on by its lateness (at most an interval): it heartbeats what a next sweep as late would
      reach after the heartbeat deadline, and settles a stalled action (overdue) whose last chance that next
      sweep would come after. Only a stalled one: one whose queue moves is completed by the engine's own guard
      at its point, which its drain's time is reckoned to.
    """

    def __init__(
        self,
        *,
        records: RecordStore,
        dispatcher: Dispatcher,
        autoscaling: Autoscaling,
        completion: CompleteAction,
        metrics: Metrics,
        resume_grace: timedelta,
        margin: timedelta,
        interval: timedelta,
        settle_before: timedelta,
        lateness: timedelta,
        failure_result: Callable[[LifecycleRecord], ActionResult],
        clock: Clock,
        out_of_line: Callable[[LifecycleRecord, datetime], None] | None = None,
        hooks: LifecycleHooks | None = None,
    ) -> None:
        """``out_of_line``: told of a launch waiting in an address line that this sweep moves on (settled, or
        found lapsed), as the engine tells it (``AssignAddress.ended_in_line``: it leaves the line and wakes the
        next waiter); never raises. ``hooks``: the hooks as Auto Scaling tells them now, whose heartbeat timeout,
        lowered since an action started, times its heartbeats (see ``_as_hook_times``); None: the records'.
        ``lateness``: how late past its tick a sweep on schedule may come unbeknown to it (``Timing
        .sweep_lateness_seconds``: the schedule's minute at least), as ``settle_before`` reckons it."""
        self._clock = clock
        self._hooks = hooks
        # This sweep's answers about the hooks' heartbeat timeouts: (group, hook) -> seconds, None when not told
        self._hook_timeouts: dict[tuple[str, str], int | None] = {}
        self._hooks_failed = False
        self._out_of_line = out_of_line
        self._records = records
        self._dispatcher = dispatcher
        self._autoscaling = autoscaling
        self._completion = completion
        self._metrics = metrics
        self._grace = resume_grace
        self._margin = margin
        self._interval = interval
        self._settle_before = settle_before
        self._lateness = lateness
        self._failure_result = failure_result
        # Whether this sweep's look where an unconfirmed action's instance is failed (see ``_beat``)
        self._look_failed = False
        # What the first part of the sweep (``last_chances``) did, for its lifecycles' part
        self._first: _FirstPart | None = None
        # This sweep's settlements whose completion failed for a while (throttled past the client's retries): the
        # lifecycle's id -> the seq its settlement left it at, claimed or its claim withdrawn (see ``_settle``)
        self._unsettled: dict[str, int] = {}

    def last_chances(self, open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        """The first part of a sweep: settle the open actions at their last chance, before any other part.

        The settlement point (``settle_before``) reckons the next sweep to reach a stalled action as late as its
        schedule may fire it, not how far into that sweep the lifecycles' part begins: after the orphans' keep-alive,
        which with a backlog of held instances (intake down through an instance refresh, each heartbeat throttled and
        retried) takes minutes. A sweep that reached the action 421 s before its global timeout left it (not its last
        chance yet), and the next, fired late in its minute, reached it after the orphans' 170 s: past the global
        timeout, Auto Scaling ending it with the hook's default result (invariant 11). Settled here, at the start of
        the sweep, the last chance comes as the settlement point reckons it; the actions it does not call for are
        left to the lifecycles' part (``__call__``), which skips those reached here, and carries this part's counts
        into its own (the report's, and the metrics it counts once a sweep). What this part has no time for (a share
        is held back for the orphans' keep-alive: its heartbeats are due at every sweep) is left to that part too, but
        for the settlements that cannot wait for the orphans' part to end, made on its share (``_cannot_wait``).

        The open actions whose heartbeat deadline comes before the orphans' part may end are kept alive here too, in
        the order of their deadlines with the settlements: after this part and the orphans' (a backlog, each call
        throttled: two minutes and more), the lifecycles' part came after the heartbeat deadline of an action the
        sweep before had not reached, and Auto Scaling ended it, undrained, hours before its global timeout
        (invariant 11; tests/unit/sweeper/test_last_chances_under_throttling.py)."""
        self._first = None
        first = _FirstPart(now)
        try:
            return self._sweep(open_records, now, time, first=first)
        finally:
            self._first = first

    def __call__(self, open_records: Sequence[LifecycleRecord], now: datetime, time: SweepTime) -> Counts:
        """The lifecycles' part: every open lifecycle but those this sweep's ``last_chances`` reached (a sweep's
        parts are all told the time it started: a first part of another sweep, whose lifecycles' part did not
        start, is not this one's)."""
        first, self._first = self._first, None
        return self._sweep(open_records, now, time, after=first if first and first.sweep == now else None)

    def _sweep(
        self,
        open_records: Sequence[LifecycleRecord],
        now: datetime,
        time: SweepTime,
        *,
        first: _FirstPart | None = None,
        after: _FirstPart | None = None,
    ) -> Counts:
        """Repair the open lifecycles: as the first part (``first``: what it reached and counted, told), only those
        at their last chance; after it (``after``), all but those it reached."""
        counts = dict.fromkeys(
            (
                "LifecyclesResumed",
                "LifecyclesSettled",
                "LifecyclesStuck",
                "LifecyclesStalled",
                "LifecyclesKeptAlive",
                "LifecyclesExpired",
                "LifecyclesExpiryUntold",
                "LifecyclesUnknown",
                "RepairsRaced",
                "RepairsFailed",
            ),
            0,
        )
        # (after the first part, this sweep's answers and looks are kept: no call made twice)
        if after is None:
            self._look_failed = False
            self._hook_timeouts, self._hooks_failed = {}, False
            self._unsettled = {}
        else:
            counts |= after.counts
        # (the first part's settlements that failed for a while, judged again below: counted once a sweep all the same)
        again = after.again if after is not None else set()
        failed_before = counts["RepairsFailed"]
        # (at most an interval: a sweep retried hours late would otherwise settle every stalled action at once)
        late = min(time.late, self._interval)
        listed = list(open_records)
        if first is not None:
            at = max(now, self._clock.now())
            listed = [
                record
                for record in listed
                if self._at_last_chance(record, at, late)
                or self._cannot_wait(self._as_hook_times(record), time)
            ]
        elif after is not None:
            listed = [record for record in listed if record.id not in after.reached]
        ordered = sorted((self._as_hook_times(record) for record in listed), key=self._urgency)
        unreached = 0
        for reached, record in enumerate(ordered):
            if not time.enough() and not (first is not None and self._cannot_wait(record, time)):
                unreached = len(ordered) - reached  # the least urgent; the next sweep orders them again
                break
            if first is not None:
                first.reached.add(record.id)
                self._unsettled.pop(record.id, None)
            # Each lifecycle at the time the sweep reaches it: the calls for the ones before may have taken
            # seconds (throttled, retried), and a start time would find a lost message "not yet overdue".
            now = max(now, self._clock.now())
            before = counts["RepairsFailed"]
            # (how much later than on schedule the next sweep may come to heartbeat: as late as this one, and after
            # this one's end)
            later = late + self._overrun(time)
            try:
                current, unread = self._as_it_is(record, now, late, later)
                if current is None:
                    found_over(open_records, record.id)  # (not counted open in the report)
                    continue  # over since the index listed it
                record = current
                overdue = record.overdue(now, self._grace)
                last = record.action_open and self._last_chance(record, now, late if overdue else timedelta())
                if overdue and record.action_open and not last:
                    last = self._runs_past_its_last_chance(record, now, late, time)
                unkept = False
                try:
                    kept = self._keep_alive(record, now, counts, later)
                except Exception as error:
                    if not (last or overdue):
                        raise
                    # No later sweep can settle it: complete it anyway (a completion needs no heartbeat),
                    # whatever kept the heartbeat from Auto Scaling: throttling, or a denial of that call alone.
                    # Its message lost: send it again anyway, as its step heartbeats the action itself (with
                    # the drain function's role, which a denial of the sweeper's alone leaves able to); the
                    # failed heartbeat still fails the sweep below (its alarm).
                    log.warning(
                        "could not heartbeat %s (%r): %s it all the same",
                        record.id,
                        error,
                        "settling" if last else "resuming",
                    )
                    kept, unkept = record, not last
                counts["LifecyclesStalled"] += overdue and record.id not in again
                if kept is not None and (overdue or last):
                    for name in self._repair(kept, now, last, time, late):
                        counts[name] += 1
                if unkept or unread:
                    counts["RepairsFailed"] += 1
            except Exception:  # one lifecycle's failure must not stop the repair of the others
                failed_item(log, "could not repair lifecycle %s", record.id)
                counts["RepairsFailed"] += 1
            # (one lifecycle counts once, however many of its calls failed: its look, then its heartbeat)
            counts["RepairsFailed"] = min(counts["RepairsFailed"], before + (record.id not in again))
            if first is not None and record.id in self._unsettled:
                # Its completion failed for a while (throttled past the client's retries): judged again by the
                # lifecycles' part, later in this sweep. Left to the engine's retry and the next sweep, an action at
                # its last sweep lapsed when its queue was the one stalled: the next sweep came after its global
                # timeout, and Auto Scaling ended it with the hook's default result (invariant 2).
                first.reached.discard(record.id)
                first.again.add(record.id)
        failed = counts["RepairsFailed"] - failed_before
        if first is not None:
            # (counted by the lifecycles' part with its own: once a sweep, as the alarms on them reckon)
            first.counts = counts
            if unreached:
                log.warning(
                    "%d lifecycles at their last chance, or due a heartbeat, left to the lifecycles' part: no time",
                    unreached,
                )
            if failed:
                raise SweepFailed(
                    f"{failed} lifecycles at their last chance or due a heartbeat could not be settled or kept alive "
                    "(the others were)"
                )
            return counts
        self._metrics.count("LifecyclesStuck", counts["LifecyclesStuck"])
        self._metrics.count("LifecyclesStalled", counts["LifecyclesStalled"])
        if unreached:
            others = f" ({failed} of the others could not be repaired)" if failed else ""
            raise time.cut_short(f"{unreached} of {len(ordered)} lifecycles not reached{others}")
        if failed:
            raise SweepFailed(f"{failed} lifecycles could not be repaired (the others were)")
        return counts

    def _cannot_wait(self, record: LifecycleRecord, time: SweepTime) -> bool:
        """Whether the first part (``last_chances``) takes the open action ``record`` even past its own share, on the
        orphans' (``SweepTime.enough_before_the_next``): its deadline (its heartbeat's, or its global timeout), less
        a completion's margin, comes before the orphans' part may end. Left to the lifecycles' part, after it, a
        stalled instance refresh's actions due 140 s into a throttled sweep were settled after their global timeout
        (invariant 2; tests/unit/sweeper/test_last_chances_under_throttling.py). Taken in the order of their
        deadlines: the first that can wait ends the part, and the orphans keep the rest of their share."""
        if not record.action_open or not time.enough_before_the_next():
            return False
        reached_by = self._clock.now() + timedelta(seconds=time.next_part_ends_within())
        return min(record.heartbeat_deadline, record.global_deadline) - self._margin < reached_by

    def _at_last_chance(self, record: LifecycleRecord, now: datetime, late: timedelta) -> bool:
        """Whether the listed ``record`` calls for its settlement now (``_last_chance``, reckoned as the repair does:
        with this sweep's lateness for a stalled one)."""
        overdue = record.overdue(now, self._grace)
        return record.action_open and self._last_chance(record, now, late if overdue else timedelta())

    def _runs_past_its_last_chance(
        self, record: LifecycleRecord, now: datetime, late: timedelta, time: SweepTime
    ) -> bool:
        """Whether a stalled action not at its last chance yet is settled now all the same, because this sweep may run
        past that chance: under an interval shorter than what the sweep has left (SweepIntervalMinutes 1 to 4, a
        sweep's 300 s), the next sweep comes up to an interval after this one ends (see ``_overrun``), not after it
        began, as the last chance reckons. So 1-minute sweeps that each ran to their reserve (throttled calls, a
        backlog) let a stalled action 215 s before its global timeout (its last chance at 210 s) go past it: the next
        sweep came 315 s later, and Auto Scaling ended it with the hook's default result, undrained (invariant 11).

        The sweep keeps to that chance instead: it ends early enough for the next one, an interval after it and as late
        as this one, to come before it (``SweepTime.end_within``: no part starts an item after that, less its
        reserve; most sweeps end within seconds anyway, and the point is reached at no cost). When that point is
        within the reserve, too near for the sweep to end by it, the action is settled now: at most a reserve (and
        this sweep's lateness) before its last chance. Settling every action the sweep's whole invocation could run
        past would complete stalled actions minutes early at every sweep."""
        left = timedelta(seconds=time.sweep_left())
        if left <= self._interval:
            return False  # (ends before an interval has passed: the next comes as the last chance reckons)
        ends_by = record.global_deadline - self._settle_before - late  # (the latest this sweep may end)
        if now + left < ends_by:
            return False
        if ends_by - now < time.reserve:
            log.warning(
                "lifecycle %s is stalled %d s before its last chance, and this sweep may run past it: settled now",
                record.id,
                (ends_by - now).total_seconds(),
            )
            return True
        log.info(
            "this sweep ends within %d s, so that the next comes before the last chance of stalled lifecycle %s",
            (ends_by - now).total_seconds(),
            record.id,
        )
        time.end_within((ends_by - now).total_seconds())
        return False

    def _overrun(self, time: SweepTime) -> timedelta:
        """How much later than an interval after this moment the next sweep may start because this one is still
        running: what its invocation has left beyond an interval (none under intervals of 5 minutes or more, the
        sweep's 300 s timeout). Sweeps run one at a time (reserved concurrency 1): a tick that fires meanwhile is
        throttled, and Lambda tries it again with a back-off ("from 1 second after the first attempt to a maximum of
        5 minutes", AWS's "How Lambda handles errors and retries with asynchronous invocation"); the next sweep
        starts once this one ended, then up to an interval later (the next tick, which finds the function free).
        Reckoned by the interval alone, 1-minute sweeps that each ran to their reserve (throttled calls, a backlog)
        let a stalled action of a 600 s hook lapse between two of them (tests/unit/sweeper/
        test_sweep_longer_than_its_interval.py). Taken for the heartbeats (one more at most per action and sweep);
        for a stalled action's last chance, the sweep ends in time instead (``_runs_past_its_last_chance``), by which
        its overrun shrinks."""
        return max(timedelta(seconds=time.sweep_left()) - self._interval, timedelta())

    def _urgency(self, record: LifecycleRecord) -> tuple[bool, datetime]:
        """The order of the repairs: the open actions first, the one Auto Scaling would end soonest (its
        heartbeat deadline, or its global timeout) first; then the rest by due time. A sweep that
        runs out of time (a Lambda timeout under throttling) has then spent it on the actions that could not
        wait, and the ones it did not reach are the most urgent of the next sweep: in the index's order (due
        time, which a heartbeat does not change) the same ones came first at every sweep, and an action
        further down timed out though every sweep ran.

        By the global timeout itself, not the settlement point (``settle_before``, 420 s before it by default): taken
        against a heartbeat deadline, that point put every action at its last chance ahead of every heartbeat due,
        though the settlement had minutes more than the heartbeat. With many actions at their last chance at once,
        each completion throttled and retried for seconds (a stalled instance refresh), a stalled action hours from its
        global timeout, whose heartbeat deadline came 150 s into the sweep, waited behind twenty settlements due 400 s
        in, and lapsed, undrained (invariant 11; tests/unit/sweeper/test_last_chances_under_throttling.py). Earliest
        deadline first, both the deadlines Auto Scaling ends an action at, serves each call by the deadline it keeps."""
        if record.action_open:
            return False, min(record.heartbeat_deadline, record.global_deadline)
        return True, record.due_at

    def _as_it_is(
        self, listed: LifecycleRecord, now: datetime, late: timedelta, later: timedelta
    ) -> tuple[LifecycleRecord | None, bool]:
        """The lifecycle as the table holds it, when its listed version calls for anything (a heartbeat, a
        resend, a settlement: each counted, the stalled and stuck ones for their alarms); None when it is over.
        The list comes from a global secondary index, which lags the table (by under a second usually, by
        minutes while it is throttled or backfilling): its version may be older than the record's, or of a
        lifecycle over since. Acted on as listed, an action the engine completed just before the sweep was
        heartbeated, found gone and counted expired (its alarm: a node may have gone undrained), and a lifecycle
        whose step ran at last was counted stalled and stuck, and sent again; the writes that follow are
        conditional on the listed seq and lost, but the counts were made. One that calls for nothing is not read
        (the reads grow with what the sweep does, not with what it lists). A read DynamoDB refuses (throttled
        past the client's retries) leaves the listed version, which heartbeats and conditional writes cannot
        harm (keeping actions alive comes first), and fails the sweep (``True``: unread)."""
        if not self._calls_for(listed, now, late, later):
            return listed, False
        try:
            current = self._records.get(listed.id)
        except Exception as error:  # (any failure: one that is not AWS's, a bug, with its traceback)
            log.warning(
                "could not read lifecycle %s again (%r): judged as the index listed it",
                listed.id,
                error,
                exc_info=not isinstance(error, TransientError),
            )
            return listed, True
        if current is None or current.finished:
            log.info("lifecycle %s, listed at %s, is over: left alone", listed.id, listed.step)
            return None, False
        return self._as_hook_times(current), False

    def _as_hook_times(self, record: LifecycleRecord) -> LifecycleRecord:
        """``record`` timed by its hook's heartbeat timeout as Auto Scaling tells it now, when an operator lowered it
        since the record took it (at intake): RecordLifecycleActionHeartbeat "extends the timeout by the length of
        time defined using the PutLifecycleHook API call", and AWS does not document that an action keeps its hook's
        timeout from its start. Timed by the record's, a stalled action was heartbeated a longer timeout apart than
        Auto Scaling gave it, and lapsed in between, undrained (invariant 11). Its deadline moves earlier by as much
        as the timeout was lowered (never later than the action's heartbeat with the new one: a heartbeat sooner is
        harmless), and the heartbeat this calls for commits the lowered timeout, by which the engine's own
        heartbeats are timed from then on. A timeout raised is not taken: whether Auto Scaling extends the current
        period by it is not told either, and the shorter one costs a heartbeat more at most.

        One DescribeLifecycleHooks per group and sweep (the catalog's answer, which the orphans' keep-alive shares).
        One that fails (throttled past the client's retries, denied) leaves the records' timing, logged, and the
        sweep asks no more of them: each would spend the client's retries before the heartbeats."""
        if self._hooks is None or not record.action_open or record.heartbeat_timeout <= 0:
            return record
        key = (record.group, record.hook)
        if key not in self._hook_timeouts:
            self._hook_timeouts[key] = self._hook_timeout(record.group, record.hook)
        timeout = self._hook_timeouts[key]
        if timeout is None or timeout >= record.heartbeat_timeout:
            return record
        lowered = timedelta(seconds=record.heartbeat_timeout - timeout)
        log.warning(
            "the heartbeat timeout of hook %s of group %s was lowered to %d s since lifecycle %s took %d s: its "
            "heartbeats are timed by the hook's",
            record.hook,
            record.group,
            timeout,
            record.id,
            record.heartbeat_timeout,
        )
        return record.model_copy(
            update={"heartbeat_timeout": timeout, "heartbeat_deadline": record.heartbeat_deadline - lowered}
        )

    def _hook_timeout(self, group: str, hook: str) -> int | None:
        """The heartbeat timeout of ``hook`` of ``group`` as Auto Scaling tells it, None when it does not (the hook
        or its group gone: its actions end with it; or the read failed)."""
        if self._hooks is None or self._hooks_failed:
            return None
        try:
            found = self._hooks.of(group).get(hook)
        except Exception as error:  # (any failure: the records' timing, as before this read)
            self._hooks_failed = True
            log.warning(
                "could not read the lifecycle hooks of %s (%r): this sweep times heartbeats by the records'",
                group,
                error,
                exc_info=not isinstance(error, TransientError),
            )
            return None
        return None if found is None else found.heartbeat_timeout

    def _calls_for(self, record: LifecycleRecord, now: datetime, late: timedelta, later: timedelta) -> bool:
        """Whether the sweep would act on ``record`` as it is: resend it, settle it, or heartbeat its action
        (``later``: the lateness its heartbeat allows for, this sweep's overrun with it)."""
        overdue = record.overdue(now, self._grace)
        return (
            overdue
            or (record.action_open and self._last_chance(record, now, late if overdue else timedelta()))
            or self._heartbeat_due(record, now, later)
        )

    def _heartbeat_due(self, record: LifecycleRecord, now: datetime, late: timedelta) -> bool:
        """Whether the action's heartbeat deadline comes before the next sweep can (as late as this one), or the
        record shows it past (a late sweep: the action may have ended)."""
        if not record.action_open:
            return False
        # Past its deadline by the record, the action may have timed out: asked, so that an expiry is told as one
        # (a heartbeat accepted after the record's last one, whose commit lost, may have kept it alive)
        lapsed = now >= min(record.heartbeat_deadline, record.global_deadline)
        return lapsed or not (
            record.heartbeat_deadline >= record.global_deadline  # the global timeout comes first anyway
            or record.heartbeat_deadline > now + 2 * self._interval + self._margin + late
            or now >= record.global_deadline - 2 * self._margin  # settled right away instead
        )

    def _keep_alive(
        self, record: LifecycleRecord, now: datetime, counts: Counts, late: timedelta
    ) -> LifecycleRecord | None:
        """Heartbeat the action if it is due (``_heartbeat_due``); the record as it is now, or None when the
        engine moved it meanwhile (it is alive) or it went past its completion."""
        if not self._heartbeat_due(record, now, late):
            return record
        # An action no step confirmed yet is heartbeated through the confirmation, as the engine's keep-alive does:
        # it looks where the instance is first, so a token Auto Scaling may take named with another group than its
        # action's (another stack's) is not kept alive for a message that named this stack's group with it.
        unconfirmed = record.verified_at is None and record.token_known
        try:
            active = self._beat(record, unconfirmed, counts)
        except AccessRefused:
            # (counted as the engine counts its refused heartbeats, apart from throttling: the sweep fails too)
            self._metrics.count("HeartbeatRetries", reason="refused")
            raise
        except TransientError:
            # (counted as the engine's throttled heartbeats are, and late: the sweeper heartbeats an action only
            # when its deadline comes before the next sweep, so a throttled one may be its last chance; the sweep
            # fails too, but its errors' alarm tells only after five minutes)
            self._metrics.count("HeartbeatRetries")
            self._metrics.count("HeartbeatsThrottledLate")
            raise
        if not active:
            if record.step is Step.COMPLETE:
                # At its completion, Auto Scaling's "no active lifecycle action" cannot tell an action that
                # expired from one a completion of ours settled: a run whose call landed and that died before
                # its commit, or the engine's run just now, whose commit this write would beat. Left to the
                # completion, which settles either ("already settled", with its result): one on time runs
                # anyway; an overdue one (its message lost) is resumed by the repair below.
                log.info("the lifecycle action of %s is no longer active: left to its completion", record.id)
                return record if record.overdue(now, self._grace) else None
            if unconfirmed and now < record.heartbeat_deadline:
                # Not confirmed before its heartbeat deadline: an action gone, or a token not held in the group
                # named (another stack's action), which only its step's confirmation tells apart; left to it,
                # resumed below when overdue, not counted expired by a look that cannot tell. (Past the deadline
                # the action timed out whatever the token was: an expiry, as for a confirmed one.)
                log.info("the lifecycle action of %s is not confirmed: left to its step", record.id)
                return record if record.overdue(now, self._grace) else None
            if moved_on(self._records, record.id, record.seq):
                # The engine ran its steps between this sweep's read and its heartbeat: perhaps its completion,
                # whose "no active lifecycle action" this is. Its own run tells an expiry (its heartbeats).
                log.info(
                    "the lifecycle action of %s is no longer active, and its lifecycle moved on", record.id
                )
                return None
            ended = action_lapsed(record, now, self._autoscaling, self._records)
            gone = self._past_its_action(record, ended, now)
            if gone is not None:
                # as the metrics tell it (gone_counted): an expiry left to the cleanup that may carry the drain
                # over (EXPIRY_UNTOLD) is no page yet, and none at all once carried over; counted on its own
                expired = gone.outcome == "action-expired"
                untold = expired and bool(gone.extra.get(EXPIRY_UNTOLD))
                counts["LifecyclesExpired"] += expired and not untold
                counts["LifecyclesExpiryUntold"] += untold
            return None
        self._metrics.count("Heartbeats")
        counts["LifecyclesKeptAlive"] += 1
        # (as of Auto Scaling's answer when the sweeper's clock runs ahead of it: see Autoscaling.renewed_at)
        kept = record.renewed(self._autoscaling.renewed_at(now))
        # Same seq: the work message in flight (if any) stays current. If the engine commits first, this write
        # loses, and the engine's record (with an earlier deadline) heartbeats again soon: harmless.
        return kept if self._records.commit(kept, expected_seq=record.seq) else None

    def _beat(self, record: LifecycleRecord, unconfirmed: bool, counts: Counts) -> bool:
        """The keep-alive's heartbeat: through the confirmation for an action no step confirmed (see ``_keep_alive``);
        whether Auto Scaling took it. While the confirmation's look where the instance is cannot be made
        (DescribeAutoScalingInstances throttled past the client's retries: a refresh of hundreds of nodes, every
        drain confirming its action; or denied to this role), by its instance (see below): this sweep may be the
        last before its heartbeat deadline, and only the sweeper heartbeats an action whose queue stalled
        (invariant 11). A heartbeat only extends an action, and the lifecycle stays unconfirmed: its step looks
        before it disrupts anything, and the next sweep's keep-alive looks again. The sweep fails all the same (its
        alarm), as when the look was all.

        Once a look has failed, the rest of the sweep's unconfirmed actions are heartbeated without one: each look
        would spend the client's retries and backoffs (seconds) on a call refused the same way, and the hundreds of
        actions a stalled refresh leaves unconfirmed would outlast the sweep, the ones it did not reach lapsing. A
        look that answered the instance on its way into its wait state (NotYetHeld: a read lagging the notification)
        did not fail: that action alone is heartbeated by its instance, and the sweep goes on looking.

        Without the look, the heartbeat names the action by its group, hook and instance, not by its token: AWS does
        not document that a token named with another group than its action's is refused, and a record of a message
        that named this stack's group with another stack's token would otherwise keep that stack's action alive at
        every sweep the look failed, its node held past its own hook's timeout (invariant 8). By its instance, the
        heartbeat reaches only an action this stack's hook holds for the instance in the group named: this
        lifecycle's, or one the orphans' keep-alive would heartbeat as well."""
        if not unconfirmed:
            return self._autoscaling.heartbeat(record.action)
        if self._look_failed:
            log.info("lifecycle %s heartbeated by its instance alone: this sweep's look failed", record.id)
            return self._autoscaling.heartbeat(_by_instance(record))
        try:
            return self._autoscaling.confirm(record.action)
        except NotYetHeld as lagging:
            # (the look answered: its instance on its way into its wait state, a read lagging the notification. No
            # failed look, no failed sweep: heartbeated by its instance, confirmed by its step or the next sweep)
            log.info("lifecycle %s heartbeated by its instance alone: %s", record.id, lagging)
            return self._autoscaling.heartbeat(_by_instance(record))
        except TransientError as error:
            log.warning(
                "could not confirm the lifecycle action of %s (%r): heartbeated by its instance alone, as the "
                "sweep's other unconfirmed actions are",
                record.id,
                error,
            )
            counts["RepairsFailed"] += 1
            self._look_failed = True
            return self._autoscaling.heartbeat(_by_instance(record))

    def _repair(
        self, record: LifecycleRecord, now: datetime, last: bool, time: SweepTime, late: timedelta
    ) -> tuple[str, ...]:
        """What became of one overdue lifecycle, or one whose action is at its last chance: the names of its
        counts."""
        if last:
            settled = self._settle(record, now, time, late)
            return (settled,) if settled is not None else ("RepairsRaced",)
        if completion_in_progress(record, now, self._margin):
            # Overdue by the grace, but a completer's claim (due at once) whose call may be on its way: left to it,
            # as ``_settle`` leaves it (a resend would claim over it and call a second time)
            log.info("lifecycle %s is being completed (claimed at seq %d): not resent", record.id, record.seq)
            return ()
        stuck: tuple[str, ...] = ()
        if record.resumes >= MAX_RESUMES:
            # Reported at every sweep it is overdue, re-sent or not, so that the alarm holds while it is stuck.
            log.error("lifecycle %s is stuck at %s after %d resumes", record.id, record.step, record.resumes)
            stuck = ("LifecyclesStuck",)
            if not self._backed_off(record, now):
                return stuck
        # A resend moves the record to a new seq (a late message arrives stale) and commits only on the seq
        # read: a step the engine ran meanwhile wins.
        return (*stuck, "LifecyclesResumed" if self._dispatcher.resume(record) else "RepairsRaced")

    def _backed_off(self, record: LifecycleRecord, now: datetime) -> bool:
        """Whether a stuck lifecycle has waited long enough since its last resend to be sent again: 2, 4, 8
        sweep intervals, then ``STUCK_BACKOFF_CAP``. Its last resend set ``updated_at``, as does whatever
        else sends its step (a step that commits, which also ends the stall; maintenance moved earlier).
        Reckoned in whole sweeps: half an interval's slack for a sweep that starts a little sooner after the
        last resend than the one that sent it."""
        intervals = min(2 ** (record.resumes - MAX_RESUMES + 1), STUCK_BACKOFF_CAP)
        return now - record.updated_at >= (intervals - 0.5) * self._interval

    def _last_chance(self, record: LifecycleRecord, now: datetime, late: timedelta) -> bool:
        """Whether this sweep may be the last that comes before the action's global timeout: past the point
        where the engine's guard completes it (``settle_before``, at least an interval and two margins before
        the global timeout: the completion's margin, and one more, a minute at least, for a late schedule, which
        EventBridge fires within its minute). Every open action is
        settled then, overdue or not: one whose message is not late yet (within the resume grace) may sit in
        a queue that has stalled, and nothing after this sweep could complete it. One the engine moves on
        is not: the guard has completed it, or is completing it (the settlement commits only on the seq it
        read, and a second completion is harmless). ``late``: how much later than on schedule the next sweep
        may come (this one's lateness, for a stalled action; see the class)."""
        return now + late >= record.global_deadline - self._settle_before

    def _left_line(self, record: LifecycleRecord, now: datetime) -> None:
        """A launch that waited in an address line, moved on by this sweep: out of the line, the next woken."""
        if self._out_of_line is not None and waits_in_line(record):
            self._out_of_line(record, now)

    def _claim_withdrawn(self, settling: LifecycleRecord) -> LifecycleRecord:
        """``settling`` with its claim gone (the same seq: the message sent on stays current); as it was when
        DynamoDB does not take it (the engine then takes the claim over, as for a completer killed)."""
        withdrawn = claim_recorded(settling)
        try:
            if self._records.commit(withdrawn, expected_seq=settling.seq):
                return withdrawn
        except Exception as error:  # (the refusal is what fails the sweep)
            log.warning("could not withdraw the claim of %s (%r)", settling.id, error)
        return settling

    def _last_sweep(self, record: LifecycleRecord, now: datetime, later: timedelta) -> bool:
        """Whether no sweep after this one can still settle the action: the next, as late as this one (``later``:
        with this sweep's overrun, see ``_overrun``), would come less than a margin (what a completion takes) before
        its global timeout, or after it. That next sweep may also fire late in its minute where this one fired early
        in its own (EventBridge runs a rate schedule "within that minute, but not on the precise 0th second"), which
        no lateness this sweep measured tells: reckoned an interval later exactly, a sweep 370 s before the global
        timeout under the defaults left a dead completer's claim to the next, which came 11 s before it."""
        return now + later + self._interval + self._lateness > record.global_deadline - self._margin

    def _past_its_action(
        self, record: LifecycleRecord, gone: Outcome, now: datetime
    ) -> LifecycleRecord | None:
        """The lifecycle moved past an action Auto Scaling no longer has (``gone``: expired, unknown, ended with its
        instance), as written; None when its write lost. Its page counted once the write lands (``gone_counted``;
        its answer lost, a 500 at every attempt after one that landed: read back, counted if it landed, as the next
        sweep finds the record past the action and counts nothing), what comes after sent on."""
        ended = advance(record, gone, now)
        try:
            landed = self._records.commit(ended, expected_seq=record.seq)
        except Exception:
            gone_counted(self._records, record, ended, None, self._metrics)
            raise
        gone_counted(self._records, record, ended, landed, self._metrics)
        if not landed:
            return None
        self._left_line(record, now)
        if not ended.finished:
            self._dispatcher.send(ended, now)
        return ended

    def _settle(self, record: LifecycleRecord, now: datetime, time: SweepTime, late: timedelta) -> str | None:
        """The name of what became of the lifecycle (its count): settled, or, never confirmed, ended as the unknown
        action Auto Scaling says it is; None when the engine, or another completer, had it (``RepairsRaced``)."""
        # The list comes from an index that lags: read the lifecycle as it is before completing its action,
        # which no conditional write could undo. One the engine has moved on is the engine's.
        current = self._records.get(record.id)
        if current is None or current.seq != record.seq:
            return None
        # Settled as read now: a completer's write at the same seq since the first read (the engine's claim withdrawn
        # after a refused call) is not undone by this claim, which would otherwise take it over as one that landed
        record = current
        # A completer's claim is held while its invocation lasts, up to a margin before the global timeout (see
        # ``claim_ends``), but at the last sweep that can settle the action a margin after its making only: one that
        # died before its invocation's end (out of memory, its runtime lost) held it until then, and the sweep
        # that would take it over next, an interval later, came after the global timeout (a sweep delivered late
        # crashed after its claim, the next one on schedule came seconds before that claim's end). A second call is
        # the lesser harm.
        last_sweep = self._last_sweep(record, now, late + self._overrun(time))
        own = self._unsettled.get(record.id, -1) == record.seq  # (this sweep's own claim, its call failed)
        if not own and completion_in_progress(record, now, self._margin, held=not last_sweep):
            # A completer (the engine's completion, the guard's) claimed it and is calling Auto Scaling: taken
            # over, its call that landed would answer this one's "no active lifecycle action". One killed after
            # its claim (its invocation over) is taken over by the next sweep (see ``claimed_for_completion``).
            log.info(
                "lifecycle %s is being completed (claimed at seq %d): left to its completer",
                record.id,
                record.seq,
            )
            return None
        log.error(
            "lifecycle %s at %s is overdue near its global timeout: completing it now", record.id, record.step
        )
        # Counted once per action (the metric pages): a sweep settles again an action an earlier settlement counted
        # once its claim committed (its call refused, throttled, or its commit after it refused, or killed); the
        # engine's guard counted an action it moved to its completion
        counted = record.outcome == "global-timeout-near" or bool(record.extra.get(NEAR_GLOBAL_TIMEOUT))
        # An action at its completion has passed every step before it: it is completed as the engine would
        # complete it (its result, or the completion's default when no step decided one, as after a readiness
        # gate that found the node Ready), and keeps its why. Any other is settled with the failure result of
        # the step it was waiting in, and its address, if its plan still had to release it, goes right after.
        decided = record.step is Step.COMPLETE
        # (an action no step confirmed, a queue stalled since its event: confirmed first, and the claim says so; one
        # Auto Scaling does not have is no action near its global timeout: see ``confirmed_near_its_timeout``)
        record, unknown = confirmed_near_its_timeout(record, now, self._autoscaling)
        if unknown is not None:
            # (nothing completed, as the engine's guard leaves it; a launch found ended with its instance: settled)
            ended = self._past_its_action(record, unknown, now)
            if ended is None:
                return None
            return _unconfirmed_count(ended)
        # Claimed before the completion, on the next seq, as the engine's guard commits its way to the completion
        # before it completes: a step the engine runs meanwhile (a readiness gate that finds the node Ready, then
        # its completion inline) loses its commit and completes nothing. Completed first, the action would be
        # asked for two results (this failure result, and the engine's), the first to come taken.
        # The claim (see ``claimed_for_completion``) is this write: the engine's own claim, or its commit, loses.
        # Held while this sweep lasts: its call may take longer than a margin (throttled, retried), and one who
        # took the claim over meanwhile would call a second time. (Its end read now: the calls since the sweep reached
        # this lifecycle, its heartbeat, read and confirmation, took their time off what is left.)
        until = self._clock.now() + timedelta(seconds=max(0.0, time.invocation_left()))
        settling = claimed_for_completion(
            record.model_copy(
                update={
                    "plan": completed_first(record),
                    "step": Step.COMPLETE,
                    "result": record.result if decided else self._failure_result(record),
                    "outcome": record.outcome if decided else "settled-by-sweeper",
                    "extra": {**record.extra, NEAR_GLOBAL_TIMEOUT: True},
                    # (the failed tries of the step it was at are no completion's, which may have landed: a new
                    # step's count starts over, as the guard's move to the completion starts it: see ``advance``)
                    **({} if decided else {"attempts": 0, "refusals": 0}),
                }
            ),
            now,
            until,
            by="sweeper",
        ).model_copy(update={"due_at": now})
        try:
            claimed = self._records.commit(settling, expected_seq=record.seq)
        except Exception:
            # (its answer lost: a 500 at every attempt after one that landed, a retry its time did not allow) read
            # back, counted if it landed: the next sweep settles the action again under its mark, and counts nothing
            if not counted and landed_after_all(self._records, settling):
                self._metrics.count("GlobalTimeoutsNear")
            raise
        if not claimed:
            return None
        if not counted:  # (a page: once per action, by the settlement that claimed it)
            self._metrics.count("GlobalTimeoutsNear")
        self._left_line(record, now)
        try:
            # (at the last sweep, a throttled heartbeat before the call does not keep it from being made)
            completed = self._completion(settling, now, last=last_sweep)
        except Exception as error:
            # (Auto Scaling throttled): the engine retries the completion, with this result, at its backoff; a
            # crash here leaves the lifecycle at its completion, overdue, for the next sweep
            if isinstance(error, (AccessRefused, NotCalled)):
                # A call that did not land (refused, or never made: what it asks first failed): its claim is not one
                # the engine's completion may take for a completion of ours (see ``claimed_for_completion``)
                settling = self._claim_withdrawn(settling)
            if isinstance(error, TransientError) and not isinstance(error, AccessRefused):
                # (tried again later in this sweep: its claim, this sweep's, is taken over by that try, which knows
                # its call failed, and its "no active lifecycle action" taken for a call of this one that landed)
                self._unsettled[record.id] = settling.seq
            self._dispatcher.send(settling, now)
            raise
        settled = claim_recorded(advance(settling, completed, now))
        if not self._records.commit(settled, expected_seq=settling.seq):
            return None
        settled_elsewhere_counted(settling, settled, self._metrics)
        if not settled.finished:
            self._dispatcher.send(settled, now)  # what comes after completion: the release, the cleanup
        return "LifecyclesSettled"


@dataclass
class _FirstPart:
    """What a sweep's first part (``LifecycleRepair.last_chances``) did: the lifecycles it reached (the lifecycles'
    part skips them: each judged once a sweep), and its counts (carried into that part's)."""

    sweep: datetime  # the sweep's start, as its parts are told it
    reached: set[str] = field(default_factory=set)
    # those it reached whose settlement failed for a while: the lifecycles' part judges them again, counted once
    again: set[str] = field(default_factory=set)
    counts: Counts = field(default_factory=dict)


def _unconfirmed_count(ended: LifecycleRecord) -> str:
    """The sweep's count of a lifecycle its settlement moved past an action no step confirmed: the unknown action it
    is, or a launch that ended with its instance (settled: over, nothing left to complete)."""
    return "LifecyclesUnknown" if ended.outcome == "unknown-action" else "LifecyclesSettled"


def _by_instance(record: LifecycleRecord) -> ActionRef:
    """``record``'s action named by its group, hook and instance alone (as an adopted one's is), not by its token."""
    return record.action.model_copy(update={"token": adopted_token(record.hook)})
