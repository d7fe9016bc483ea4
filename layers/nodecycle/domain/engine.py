"""The step engine: runs a lifecycle one short, idempotent step at a time.

Each step is one function call that returns an :class:`Outcome`; the engine commits the new record state
(conditional on ``seq``), keeps the lifecycle action alive with heartbeats, and then either runs the next
step inline or sends a work message (with ``DelaySeconds`` when it must wait: it never sleeps).

Crash safety: the commit comes before the message. A crash after a commit and before the next message
leaves the redelivered message behind the record's ``seq``. Any such older message sends a *watch*: a
message that comes back once the record's current step would be ``resume_grace`` overdue; if the record
has not moved by then, its step is sent again under a new ``seq`` (the sweeper does the same for
lifecycles whose messages are all gone). Duplicate messages for the same ``seq`` collapse because only one
commit per ``seq`` can win, and a watch ends at its first check, so duplicates never multiply.

Hand-over: a step that frees a budget slot passes it on to a waiter in the same write, and wakes the waiter.
The first waiter whose step is this worker's is not sent a wake message: the invocation that freed the slot
runs the waiter's step itself once its own record is committed (it is warm, and has the time), so the slot
is not left idle while a wake message waits for a container of the wake lane. Only once its own lifecycle's
steps are over for the invocation: one that goes on inline sends the kept waiter its wake message as it goes
on. Any other waiter is sent its wake message at once, as before. A wake-up only ever comes sooner than the
waiter's own retry: one lost with a crash costs time, not the slot. The waiter's step run so is covered by the
invocation's message, not the waiter's: the step that kept the waiter names it in its own commit, and that
message, delivered again after the invocation died, wakes or watches the waiter (see ``HandOver``), whose own
retry may have been lost too.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from nodecycle.domain.dispatch import (
    Dispatcher,
    HandOver,
    hand_over_now,
    marked_for_hand_over,
    not_asking_yet,
    waits_for_slot,
)
from nodecycle.domain.eip.wake import waits_in_line
from nodecycle.domain.errors import AccessRefused, TransientError, retry_after_wait
from nodecycle.domain.flow import (
    Worker,
    after_completion,
    completed_first,
    draining,
    following,
    needs_confirmation,
    worker_of,
)
from nodecycle.domain.model import (
    CARRIED_OVER,
    ENDS_ITS_INSTANCE,
    EXPIRY_UNTOLD,
    SETTLED_ELSEWHERE,
    WARM_POOL,
    LifecycleRecord,
    Step,
    Transition,
    may_carry_over,
)
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.cluster import Refused
from nodecycle.domain.ports.instances import GONE_STATES
from nodecycle.domain.ports.lifecycle import Autoscaling, RecordStore, WorkMessage, WorkQueues
from nodecycle.domain.ports.runtime import Clock, Metrics

log = logging.getLogger(__name__)

MAX_RETRY_BACKOFF_SECONDS = 180  # the longest wait before retrying a step after a transient error
MAX_BACKOFF = MAX_RETRY_BACKOFF_SECONDS / 1.5  # times a jitter of up to 1.5
# A cordoned node's drain holds a slot others wait for, and its drain timeout runs: an API server that fails
# for a while must not push the next try (or the forced end at the timeout) minutes away. Its steps retry at
# most this far apart, as ``kubectl drain`` retries an eviction every 5 s.
DRAIN_RETRY_CAP_SECONDS = 5.0
# A refused step (see ``StepEngine._retry``) is tried this often in a row, with the step's backoff (minutes for
# most steps, seconds for a drain's), before its message fails and goes the way of an error: 4 to 5 minutes of
# backoff, then the queue's deliveries (5 receives, a visibility timeout apart) before the dead-letter queue
MAX_REFUSED_ATTEMPTS = 8
HEARTBEAT_RETRY_MIN = timedelta(seconds=5)  # a failed heartbeat is not tried again sooner than this
MIN_PIECE = timedelta(seconds=1)  # the shortest piece a long wait is cut into


# record.extra key: the claim of the completion of a lifecycle's action (see ``claimed_for_completion``): the
# record's seq the claim wrote (``seq``), when (``at``), when its completer's invocation ends (``until``), and
# whether it took over the claim of a completer that vanished (``over``). Gone from the record once its
# completer commits what its call did.
COMPLETION_CLAIM = "completion_claim"


def claimed_for_completion(
    record: LifecycleRecord, now: datetime, until: datetime | None = None, *, by: str = "engine"
) -> LifecycleRecord:
    """``record`` claimed by a completer about to call CompleteLifecycleAction, under the next ``seq``.

    Every completer (the engine's COMPLETE step, the sweeper's settlement) commits this claim, conditional on
    the seq it read, *before* its call, and one whose claim loses does not call. Completed first and recorded
    after, two completers racing (the engine's completion and the sweeper's settlement at its last chance, or
    two sweeps at once) each called: the second was told "no active lifecycle action", and the first's commit
    lost to the second's, so the record said the action was settled elsewhere (its false alarm). A completer
    that finds the record claimed by another still at work (``completion_in_progress``) leaves it to that one.

    A claim still on the record when the next one is made is a completer's that never recorded what its call
    did (killed by its Lambda timeout, or its commit refused, after a call that may have landed): the claim
    that takes it over says so, and its "no active lifecycle action" is taken for that call's (see
    ``completed_by_a_vanished_claim``).

    ``until``: when the completer's invocation ends, past which its call cannot still be on its way (its AWS
    calls end within it: a Lambda's timeout kills it). A call may take longer than the heartbeat margin (Auto
    Scaling throttled: botocore's five attempts, their backoffs and read timeouts, within the sweeper's 300 s):
    a claim taken over a margin after it was made, its completer still calling, was called twice, and the
    first call was told "no active lifecycle action" (the false alarm). Kept at least a margin either way.

    ``by``: the completer ("engine" or "sweeper"), for the operator (``nodecycle status``): a settlement that
    keeps the action's own outcome cannot be told from the engine's completion by the record otherwise."""
    over = isinstance(record.extra.get(COMPLETION_CLAIM), dict)
    claim: dict[str, object] = {"seq": record.seq + 1, "at": now.isoformat(), "over": over, "by": by}
    if until is not None:
        claim["until"] = until.isoformat()
    return record.model_copy(
        update={
            "seq": record.seq + 1,
            "updated_at": now,
            "due_at": min(record.due_at, now),
            "extra": {**record.extra, COMPLETION_CLAIM: claim},
        }
    )


def confirmed_before_claim(
    record: LifecycleRecord, now: datetime, autoscaling: Autoscaling
) -> LifecycleRecord:
    """``record`` as its completer claims it: an action no step confirmed is confirmed first (where its instance
    is, then a heartbeat: what the completion would ask after the claim, ``CompleteAction._confirmed``), and the
    claim carries it (``verified_at``). A completer that vanishes after its call landed (killed, or its commit
    refused) has then told the one that takes its claim over that the action was this lifecycle's: that one's
    "no active lifecycle action" is the call's, not an action never confirmed taken as settled elsewhere (the
    alarm; the steps after it refused as for an unknown action). Not confirmed, or not answered (throttled), it
    is left to the completion, which asks again."""
    if record.verified_at is not None or not record.token_known:
        return record
    try:
        confirmed = autoscaling.confirm(record.action)
    except TransientError as error:
        log.info(
            "could not confirm the lifecycle action before its claim (the completion asks again): %s", error
        )
        return record
    # (renewed as of Auto Scaling's answer when this function's clock runs ahead of it: see Autoscaling.renewed_at)
    return record.renewed(autoscaling.renewed_at(now), verified_at=now) if confirmed else record


def claim_recorded(record: LifecycleRecord) -> LifecycleRecord:
    """``record`` as its completer commits what its call did: no claim left on it."""
    if COMPLETION_CLAIM not in record.extra:
        return record
    extra = {key: value for key, value in record.extra.items() if key != COMPLETION_CLAIM}
    return record.model_copy(update={"extra": extra})


def completed_by_a_vanished_claim(record: LifecycleRecord) -> bool:
    """Whether ``record``'s claim took over one whose completer vanished (see ``claimed_for_completion``)."""
    claim = record.extra.get(COMPLETION_CLAIM)
    return isinstance(claim, dict) and bool(claim.get("over"))


def completion_in_progress(
    record: LifecycleRecord, now: datetime, within: timedelta, *, held: bool = True
) -> bool:
    """Whether a completer claimed the record's completion and may be calling Auto Scaling now: nothing was
    committed after its claim, and its invocation has not ended (nor ``within``, the heartbeat margin, passed
    since the claim). One that did not commit by then was killed, and its claim is taken over. ``held``: see
    ``claim_ends``."""
    ends = claim_ends(record, within, held=held)
    return ends is not None and now < ends


def claim_ends(record: LifecycleRecord, within: timedelta, *, held: bool = True) -> datetime | None:
    """When the claim on ``record`` may be taken over (see ``completion_in_progress``): a margin (``within``)
    after it was made, or when its completer's invocation ends, whichever is later (a claim written without
    its end, or not ``held`` so: the margin alone); None: no claim at work.

    An invocation's end is held no later than a margin before the action's global timeout: a completer may end
    before its invocation does (out of memory, its runtime lost), and its claim then stood past the global
    timeout, every taker-over leaving it be (the sweeper's, under sweeps a minute apart, is made some 210 s
    before it with up to 300 s of its invocation left; an ``until`` from a clock that runs ahead, as far), and
    Auto Scaling ended the action with its default result. A second call is the lesser harm."""
    claim = record.extra.get(COMPLETION_CLAIM)
    if not isinstance(claim, dict) or claim.get("seq") != record.seq or not record.action_open:
        return None
    ends = datetime.fromisoformat(str(claim.get("at"))) + within
    until = claim.get("until")
    if not isinstance(until, str) or not held:
        return ends
    return max(ends, min(datetime.fromisoformat(until), record.global_deadline - within))


@dataclass(frozen=True)
class Outcome:
    """What a step decided. Build with :meth:`next`, :meth:`again` or :meth:`goto`."""

    then: Step | None  # None: the next step of the plan
    delay: float = 0
    again: bool = False
    changes: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def next(cls, delay: float = 0, **changes: Any) -> Outcome:
        return cls(then=None, delay=delay, changes=changes)

    @classmethod
    def wait(cls, delay: float, **changes: Any) -> Outcome:
        """Run this step again after ``delay`` seconds."""
        return cls(then=None, delay=delay, again=True, changes=changes)

    @classmethod
    def goto(cls, step: Step, delay: float = 0, **changes: Any) -> Outcome:
        return cls(then=step, delay=delay, changes=changes)


class StepHandler(Protocol):
    def __call__(self, record: LifecycleRecord, now: datetime) -> Outcome: ...


@runtime_checkable
class ClaimingStep(Protocol):
    """A step whose record is claimed before it runs (the COMPLETE step: see ``claimed_for_completion``), and
    that reads what its claim must say first (``confirmed_before_claim``), within its own time."""

    def before_claim(self, record: LifecycleRecord, now: datetime) -> LifecycleRecord: ...

    def __call__(self, record: LifecycleRecord, now: datetime, *, last: bool = False) -> Outcome:
        """``last``: no later run is sure to come before the action's global timeout (see ``_run_step``)."""
        ...


class Handled(StrEnum):
    RAN = "ran"
    DONE = "done"
    STALE = "stale"  # a watch found the chain had moved on
    CONFLICT = "conflict"  # another delivery of the same seq committed first
    RESENT = "resent"  # the record's current message looked lost: sent again
    WATCHING = "watching"  # an older message came again: a watch checks later whether the chain was lost
    FORWARDED = "forwarded"  # the current step belongs to the other worker
    SNOOZED = "snoozed"  # arrived before its due time (a wait longer than SQS's delay limit)
    UNKNOWN = "unknown"  # no such record (expired, or never written)
    FINISHED = "finished"


@dataclass(frozen=True)
class EngineTiming:
    resume_grace: timedelta  # how overdue a message must be before it is presumed lost
    heartbeat_margin: timedelta  # what a step may take, plus the delivery of its message
    # How late after its due time the next run can start when one fault strikes: its invocation dies (the
    # message comes back after the queue's visibility timeout), or a crash after a commit loses the next
    # message (the redelivered older one sends a watch, which re-sends it once the resume grace has
    # passed). One or the other, so the later of the two, not their sum. A heartbeat must come early
    # enough that such a retry still finds the action alive.
    redelivery: timedelta
    # How long before the global timeout the guard completes an action, whatever it waits for: at least the
    # margin the completion needs plus one fault's retry (an invocation that dies at the guard's run comes
    # back a redelivery later, and must still find the action alive), and where the sweeper's last run
    # would settle it anyway (settings: settle_before_seconds).
    settle_before: timedelta
    inline_budget: float = 15.0  # seconds a step may take: run the next one inline only with this left


class StepEngine:
    def __init__(
        self,
        *,
        worker: Worker,
        steps: Mapping[Step, StepHandler],
        records: RecordStore,
        queues: WorkQueues,
        autoscaling: Autoscaling,
        clock: Clock,
        metrics: Metrics,
        timing: EngineTiming,
        failure_result: Callable[[LifecycleRecord], ActionResult],
        out_of_line: Callable[[LifecycleRecord, datetime], None] | None = None,
        step_time: Callable[[], AbstractContextManager[object]] = nullcontext,
    ) -> None:
        """``step_time``: entered around the confirmation before a step (``_verify``), whose Auto Scaling calls
        are the step's: they end within the step's time, as its own calls do (the wiring's), and a hung call
        leaves the engine the reserve it keeps for its commit, heartbeat and next message."""
        self._worker = worker
        self._step_time = step_time
        # Told of a launch waiting in an EIP pool's line (``waits_in_line``) that the engine, not its step, moves
        # on (the guard settles it, a heartbeat finds its action lapsed): it leaves the line and wakes the next
        # waiter, as its step does when it gives up. Never raises.
        self._out_of_line = out_of_line
        self._steps = steps
        self._records = records
        self._queues = queues
        self._autoscaling = autoscaling
        self._clock = clock
        self._metrics = metrics
        self._timing = timing
        self._failure_result = failure_result
        self._dispatch = Dispatcher(records=records, queues=queues, clock=clock, metrics=metrics)

    def handle(
        self,
        message: WorkMessage,
        time_left: Callable[[], float] = lambda: 60.0,
        scope: Callable[[str], AbstractContextManager[object]] = lambda record_id: nullcontext(),
    ) -> Handled:
        """Run the message's step, and the next ones inline while they are progress; then run the step of a
        waiter one of them freed a slot for (see the module's docstring). ``scope(record_id)``: the log
        context of one lifecycle's run (its keys), entered for the message's lifecycle and, after it, for
        the waiter's: each line names the lifecycle it is about."""
        hand_over = HandOver(
            self._worker, message.record_id, time_left, self._timing.inline_budget, seq=message.seq
        )
        holding = hand_over_now.set(hand_over)
        try:
            with scope(message.record_id):
                handled = self._handle(message, time_left)
        except BaseException:
            if hand_over.waiter is not None:  # this invocation fails: the wake lane runs the waiter
                self._send_wake_or_leave(hand_over.waiter)
            raise
        finally:
            hand_over_now.reset(holding)
        if hand_over.waiter is not None:
            with scope(hand_over.waiter.id):
                self._run_handed_over(hand_over.waiter, time_left)
        return handled

    def _run_handed_over(self, waiting: LifecycleRecord, time_left: Callable[[], float]) -> None:
        """Run a woken waiter's step as its wake message would have, in this invocation (a slot it frees in
        turn is woken through the wake lane). Its failure is not this invocation's, whose message is done:
        the wake message goes instead, and the wake lane runs it as it would have."""
        if time_left() <= self._timing.inline_budget:
            # The time there was at the wake-up went to the steps after it (slow calls, a heartbeat): the
            # invocation's end could cut the waiter's step short, and its wake-up with it, leaving its slot
            # idle until its own retry
            self._send_wake_or_leave(waiting)
            return
        wake = WorkMessage(
            record_id=waiting.id, seq=waiting.seq, step=waiting.step, wake=True, token=waiting.token
        )
        try:
            handled = self._handle(wake, time_left)
        except Exception:
            log.exception("the step of %s, handed a slot, failed here: sent to the wake lane", waiting.id)
            self._send_wake_or_leave(waiting)
            return
        if handled not in (Handled.RAN, Handled.DONE):
            # (moved on, or started over, since the wake-up: nothing ran, as in the wake lane)
            log.info("the waiter %s handed a slot had nothing to run here: %s", waiting.id, handled)
            return
        log.info("the slot freed went to %s in this invocation: %s", waiting.id, handled)
        self._metrics.count("SlotsHandedOver")

    def _look_after_kept_waiter(self, record: LifecycleRecord, message: WorkMessage) -> None:
        """The message delivered again of an invocation that kept a waiter to run itself (see ``HandOver``): that
        invocation may have died in the waiter's step, after its commit and before its next message, and left it
        none (the sweeper's to find, its slot held idle until then). The waiter is woken if it still waits for its
        slot (its step takes the slot passed on, or waits again), else watched at its current seq: resent if it
        has not moved once it is overdue, as a lost message of its own would be. A chain of its own that is alive
        finds the wake-up or the watch stale. (Only on a delivery again: the first one never reads its own mark.)"""
        kept = HandOver.kept_by(record, message.seq)
        if kept is None:
            return
        waiter_id, token = kept
        waiter = self._records.get(waiter_id)
        if waiter is None or waiter.finished or waiter.token != token:
            return
        log.warning(
            "the delivery of seq %d before this one ran the step of %s, handed a slot: looking after it",
            message.seq,
            waiter_id,
        )
        if waits_for_slot(waiter):
            self._dispatch.wake(waiter_id, token=token)
        else:
            self._dispatch.watch(waiter, self._clock.now(), self._timing.resume_grace)

    def _send_wake_or_leave(self, waiting: LifecycleRecord) -> None:
        try:
            self._dispatch.send_wake(waiting)
        except TransientError as error:  # (the invocation's own outcome stands)
            log.warning("could not wake %s (it takes its slot at its own retry): %s", waiting.id, error)

    def _handle(self, message: WorkMessage, time_left: Callable[[], float]) -> Handled:
        record = self._records.get(message.record_id)
        if record is None:
            log.warning("no lifecycle record %s: message dropped", message.record_id)
            return Handled.UNKNOWN
        if message.watch is None and message.seq != record.seq:
            self._look_after_kept_waiter(record, message)
        if record.finished:
            return Handled.FINISHED
        now = self._clock.now()
        if message.watch is not None:
            return self._check(message, record, now)
        if message.wake and (message.token not in (None, record.token) or not_asking_yet(record, now)):
            # a wake-up of the lifecycle this record held before it started over (the next maintenance, due
            # later): nothing for this one, which has not asked for a slot yet
            return Handled.STALE
        if (
            message.wake
            and message.seq != record.seq
            and message.step is record.step
            and (waits_for_slot(record) or waits_in_line(record))
        ):
            # A wake overtaken by the waiter's own retry, which read the budget before the slot was freed and
            # committed "wait again" first: the slot is still there for it. Run at the current seq (the step is
            # idempotent and its commit conditional), rather than leave the slot idle until that retry. So for a
            # launch in an EIP pool's line whose own look listed the pool before the address came back.
            message = message.model_copy(update={"seq": record.seq})
        if message.seq != record.seq and _refused_to_the_last(record, message, now, self._timing):
            # The redelivery of a completion's message that failed, refused to its last try: its claim moved the
            # record's seq, and watched it would succeed, its watch re-send the step, and a denial that stays
            # loop unseen by the dead-letter queue. Run at the current seq: refused again, it fails again, until
            # SQS dead-letters it (the alarm); let through, it completes (the step is idempotent, its claim
            # conditional).
            message = message.model_copy(update={"seq": record.seq})
        if message.seq != record.seq:
            # An older message came again: a duplicate, or the redelivery after a crash that may have struck
            # between a commit and the next message. Too early to tell: a watch comes back once the current
            # step would be overdue, and repairs the chain if it has not moved by then.
            self._watch(record, now)
            return Handled.WATCHING
        # Early by SQS's clock too, not only by this container's: SQS delivers a message no sooner than its delay,
        # so only a wait chained past SQS's 900 s limit comes before its due time. A container whose clock runs
        # minutes behind would read a message on time as early by as much, and snooze it that long: a run due at the
        # last safe moment for its heartbeat would come after the action timed out.
        # The rest of the wait is measured from the same time: on the container's clock alone, one minutes behind
        # would delay the next piece of a chained wait as much too long.
        delivered = now if message.delivered_at is None else max(now, message.delivered_at)
        if record.due_at - delivered > timedelta(seconds=1) and not message.wake:
            self._dispatch.send(record, delivered, here=self._worker)
            return Handled.SNOOZED

        while True:
            if worker_of(record, self._worker) is not self._worker:
                self._dispatch.send(record, now)
                return Handled.FORWARDED
            ran = record.step
            committed = self._run_step(record, now, time_left)
            if committed is None:
                return Handled.CONFLICT
            record = committed
            if record.finished:
                return Handled.DONE
            now = self._clock.now()
            inline = (
                # Only progress runs inline. A step that must run again (a waiter's retry, a drain's poll, a
                # transient failure) goes back through the queue even when its wait is over by the time it
                # returns (a slow API server): looping here, a few waiters would hold every invocation the
                # function's concurrency allows, and the queued polls of the drains in progress would starve.
                record.step is not ran
                and record.due_at <= now
                and worker_of(record, self._worker) is self._worker
                and time_left() > self._timing.inline_budget
            )
            if not inline:
                self._dispatch.send(record, now, here=self._worker)
                return Handled.RAN
            self._send_kept_waiter()

    def _send_kept_waiter(self) -> None:
        """This invocation goes on with its own lifecycle's next step: a waiter kept to run after the step that
        woke it is sent its wake-up now, for the wake lane to run meanwhile, rather than wait behind those
        steps (a cordon, an eviction pass: seconds) with its slot idle. One SQS refuses (throttled past the client's
        retries, a 5xx) stays kept, and runs here after those steps: dropped, its slot stood idle until the waiter's
        own retry (up to RETRY_IN_LINE_FACTOR x BudgetRetrySeconds), while this invocation was alive to run it."""
        hand_over = hand_over_now.get()
        if hand_over is None or hand_over.waiter is None:
            return
        try:
            self._dispatch.send_wake(hand_over.waiter)
        except TransientError as error:
            log.warning(
                "could not wake %s now: it runs here after this lifecycle's steps (or is sent again then): %s",
                hand_over.waiter.id,
                error,
            )
            return
        hand_over.waiter = None

    # -- lost messages ----------------------------------------------------------------------------------

    def _watch(self, record: LifecycleRecord, now: datetime) -> None:
        self._dispatch.watch(record, now, self._timing.resume_grace, here=self._worker)

    def _check(self, watch: WorkMessage, record: LifecycleRecord, now: datetime) -> Handled:
        if record.seq != watch.watch:
            return Handled.STALE  # the chain moved on: nothing was lost
        if not record.overdue(now, self._timing.resume_grace):
            self._watch(record, now)  # early (clock rounding): look again when it is
            return Handled.WATCHING
        ends = claim_ends(record, self._timing.heartbeat_margin)
        if ends is not None and now < ends:
            # A completer's claim, due at once, and that completer may be calling Auto Scaling now (a resume grace
            # shorter than the margin): not lost. Re-sent, the step would claim over it and call a second time, and
            # the first call, told "no active lifecycle action", would count the action settled elsewhere. Looked
            # at again once the claim may be taken over (see ``completion_in_progress``).
            delay = math.ceil((ends - now).total_seconds()) + 1
            self._dispatch.send_again(record, watch, delay_seconds=delay, here=self._worker)
            return Handled.WATCHING
        log.warning("the message for step %s (seq %d) looks lost: sending it again", record.step, record.seq)
        self._dispatch.resume(record)
        return Handled.RESENT

    # -- one step ---------------------------------------------------------------------------------------

    def _run_step(
        self, record: LifecycleRecord, now: datetime, time_left: Callable[[], float]
    ) -> LifecycleRecord | None:
        outcome = self._guard(record, now)
        unanswered = claimed = False
        # The confirmation's heartbeat in this run, if it asked one: when it was accepted, or that it failed
        # (the guard's, of an action no step confirmed, too)
        renewed_at = now if outcome is not None and "verified_at" in outcome.changes else None
        heartbeat_failed = False
        stepped: Outcome | None = None  # what the step itself decided (not the guard, a lapse, a retry)
        if outcome is None:
            handler = self._steps[record.step]
            try:
                try:
                    asked = record.heartbeats
                    with self._step_time():
                        record, outcome = self._verify(record, now)
                    renewed_at = now if record.heartbeats > asked else None
                except TransientError:
                    heartbeat_failed = True  # (its heartbeat, which the keep-alive would ask again at once)
                    raise
                if outcome is None:
                    if record.step is Step.COMPLETE and record.action_open:
                        if isinstance(handler, ClaimingStep):
                            asked = record.heartbeats
                            record = handler.before_claim(record, now)
                            renewed_at = now if record.heartbeats > asked else renewed_at
                        # (see ``claimed_for_completion``: lost, another completer has the action)
                        # (held while this invocation lasts: see ``claimed_for_completion``'s ``until``; its end read
                        # now, not from when the run began: the confirmations since took their time off what is left)
                        until = self._clock.now() + timedelta(seconds=max(0.0, time_left()))
                        claim = claimed_for_completion(record, now, until)
                        if not self._records.commit(claim, expected_seq=record.seq):
                            log.info("the completion of seq %d was claimed by another completer", record.seq)
                            return None
                        record, claimed = claim, True
                    if isinstance(handler, ClaimingStep):
                        # Within a margin of the global timeout (where its retries are due at once: see _keep_alive)
                        # no later run is sure to come before it: what the completion asks before its call, failing
                        # (throttled), does not keep the call from being made (see ``CompleteAction``)
                        last = now >= record.global_deadline - self._timing.heartbeat_margin
                        outcome = stepped = handler(record, now, last=last)
                    else:
                        outcome = stepped = handler(record, now)
            except (TransientError, Refused) as error:
                try:
                    outcome = self._retry(record, now, error)
                except (TransientError, Refused):
                    if claimed:
                        # Refused to the last try (its message fails): a call that did not land, whose claim the
                        # next completer must not take for a completion of ours (the earlier tries' were recorded).
                        # The last refusal counted, so that the message's redeliveries fail too (see _handle), and
                        # the try among the attempts, so that one before it that may have landed (a 5xx) is still told
                        # by them (``attempts > refusals``: a launch's completion asks its token first). Under
                        # the next seq: a write of the claimed record read before this one (the sweep's keep-alive,
                        # at the seq it read) loses, rather than put the claim back and the refusal off.
                        withdrawn = claim_recorded(record).model_copy(
                            update={
                                "attempts": record.attempts + 1,
                                "refusals": record.refusals + 1,
                                "seq": record.seq + 1,
                            }
                        )
                        self._records.commit(withdrawn, expected_seq=record.seq)
                    raise
                # A completion that failed so may have landed all the same (a read timeout, a 5xx after Auto
                # Scaling took the call); a refusal did not, but one of the tries before it that failed
                # otherwise may have (``attempts`` counts every failed try since the step's last progress,
                # ``refusals`` the refused ones)
                refused = isinstance(error, (AccessRefused, Refused))
                unanswered = claimed and (not refused or record.attempts > record.refusals)
        updated = advance(record, outcome, now)
        updated = _successor_of(claim_recorded(updated) if claimed else updated, now)
        # Judged when the step ended, not when it began: a step that took seconds (slow or throttled APIs)
        # may have used up the time in which its successor could still heartbeat...
        ended = self._clock.now()
        late = self._guard(updated, ended)
        if late is not None:
            # ...or run past the point where the guard completes the action: completed now, as the next run's
            # guard would, but that run could come up to a margin before the global timeout, where one fault
            # (its invocation dying) would let the action time out with the hook's default result
            updated = advance(updated, late, ended).model_copy(update={"seq": updated.seq})
        updated = self._keep_alive(
            updated,
            ended,
            read_seq=record.seq,
            completion_unanswered=unanswered,
            renewed_at=renewed_at,
            heartbeat_failed=heartbeat_failed,
        )
        # (the waiter this step kept to run in this invocation, if any: see HandOver)
        updated = marked_for_hand_over(hand_over_now.get(), record, updated)
        try:
            landed = self._records.commit(updated, expected_seq=record.seq)
        except Exception:
            # (landed or not: its answer lost, its message's delivery again stale if it landed; see gone_counted)
            gone_counted(self._records, record, updated, None, self._metrics)
            if _guard_decided(record, updated) and landed_after_all(self._records, updated):
                self._metrics.count("GlobalTimeoutsNear")
            raise
        if not landed:
            log.info("another delivery already ran step %s (seq %d)", record.step, record.seq)
            if waits_for_slot(record) and not waits_for_slot(updated):
                # This run took a slot in the budget document, but the commit that says so lost, perhaps to
                # the waiter's own retry ("wait again", read before the slot was freed): wake the lifecycle,
                # or it holds the slot unused until that retry. If it moved on, the wake does nothing.
                self._dispatch.wake(record.id, token=record.token)
            gone_counted(self._records, record, updated, False, self._metrics)
            return None
        settled_elsewhere_counted(record, updated, self._metrics)
        gone_counted(self._records, record, updated, True, self._metrics)
        if _guard_decided(record, updated):
            # The guard's decision, counted once it landed: a run whose commit was refused, its message delivered
            # again, decides it again (a metric that pages: once per action)
            self._metrics.count("GlobalTimeoutsNear")
        if updated.step is not record.step:
            log.info("step %s -> %s", record.step, updated.step, extra={"seq": updated.seq})
            if self._out_of_line is not None and waits_in_line(record) and (stepped is None or stepped.again):
                self._out_of_line(record, ended)
        return updated

    def _retry(self, record: LifecycleRecord, now: datetime, error: TransientError | Refused) -> Outcome:
        """Run a step that failed again later, with backoff. A refusal (AWS's AccessDenied to the role, naming
        the call and the code; the API server's 403 of a call the step does not decide on itself, such as the
        budget ConfigMap's read or write in a waiter's ask or a cleanup's release) is told as an error, and
        counted apart (``StepRetries`` with ``reason=refused``): it lasts as long as a policy says so, not
        seconds. It is retried as a transient failure is, for a policy rolled out and back or IAM propagating
        after a stack update, up to ``MAX_REFUSED_ATTEMPTS`` refused tries since the step last made progress
        (the throttled tries among them do not count, nor start the count over); then the step's message
        fails (delivered again after the queue's visibility timeout, then dead-lettered: the alarm), as an
        error no retry changes, rather than retried every few minutes unseen until the global-timeout guard.
        (Nothing here settles an action: a refused completion or heartbeat is never taken for an action
        gone.)"""
        delay = min(MAX_BACKOFF, 2 ** min(record.attempts, 7)) * random.uniform(1.0, 1.5)
        left = None
        if draining(record.step):
            delay = min(delay, DRAIN_RETRY_CAP_SECONDS)
            left = record.drain_deadline - now if record.drain_deadline is not None else None
            if left is not None and left > timedelta(0):
                # (tried again at its deadline at the latest, where the drain's timeout policy acts: up to
                # a second past it, as its polls look: see drain.common.LOOK_SLACK)
                delay = min(delay, max(1.0, math.ceil(left.total_seconds())))
        attempts = record.attempts + 1
        if isinstance(error, TransientError) and not isinstance(error, AccessRefused):
            # A server that said when to come back (a 429's Retry-After) is not asked sooner, as client-go
            # does not ask it: a retry sooner only adds to the load it sheds (a drain: up to its deadline)
            delay = max(delay, retry_after_wait(error.retry_after, left))
            log.warning(
                "step %s failed (attempt %d), retrying in %.0fs: %s", record.step, attempts, delay, error
            )
            self._metrics.count("StepRetries", step=record.step.value)
            return Outcome.wait(
                delay, attempts=attempts, refusals=record.refusals, last_error=str(error)[:500]
            )
        # (its own series of the retries, to graph and alarm on apart from throttling's)
        self._metrics.count("StepRetries", step=record.step.value, reason="refused")
        refusals = record.refusals + 1
        if refusals >= MAX_REFUSED_ATTEMPTS:
            log.error(
                "step %s refused (%d refused tries, %d failed in all), failing its message: %s",
                record.step,
                refusals,
                attempts,
                error,
            )
            raise error
        log.error(
            "step %s refused (refusal %d, attempt %d), retrying in %.0fs: %s",
            record.step,
            refusals,
            attempts,
            delay,
            error,
        )
        return Outcome.wait(delay, attempts=attempts, refusals=refusals, last_error=str(error)[:500])

    def _verify(self, record: LifecycleRecord, now: datetime) -> tuple[LifecycleRecord, Outcome | None]:
        """Before the first step that disrupts anything (a budget slot, a cordon, an eviction, an address
        assigned or released), or that keeps a launch's record open (the readiness gate: see
        ``flow.needs_confirmation``), confirm with Auto Scaling that this token's action is active: a heartbeat with
        the token does (and renews the action). A forged, replayed or stale message names an action Auto
        Scaling does not have: nothing is touched, the lifecycle goes past its completion as an
        ``unknown-action``. And again before any disruptive step that runs past the record's heartbeat
        deadline (a stalled queue, throttled heartbeats): the action may have timed out meanwhile, and the
        instance live on under a newer one (back from its warm pool, in service after a default CONTINUE),
        whose address or node this step would change (``action-expired``). A disruptive step after the
        action is settled (an address released after an action completed near its global timeout) runs only
        for an action Auto Scaling confirmed: one settled before any step asked it (the guard completes first),
        whose completion it refused, may be a forged notification dated so that its global timeout is near,
        and the address of a running instance would go. A true action that timed out so leaves its instance's
        addresses to the lifecycle of EC2's state change (its stop, its termination) and to the sweeper."""
        if not needs_confirmation(record.step):
            return record, None
        if not record.action_open:
            if record.transition.has_hook and not record.action_confirmed:
                log.warning(
                    "Auto Scaling never confirmed the lifecycle action of %s (settled near its global timeout "
                    "with no active action of this token): step %s disrupts nothing",
                    record.instance_id,
                    record.step,
                )
                return record, Outcome.next(outcome="unknown-action")  # (counted once it lands: gone_counted)
            return record, None
        if record.verified_at is not None and now <= record.heartbeat_deadline:
            return record, None
        # (the first confirmation also looks where the instance is: a token paired with another instance than
        # its action's, which Auto Scaling may accept, confirms nothing; see Autoscaling.confirm. Later ones
        # renew an action already confirmed for this instance)
        verify = self._autoscaling.heartbeat if record.verified_at is not None else self._autoscaling.confirm
        if not verify(record.action):
            if record.verified_at is not None and moved_on(self._records, record.id, record.seq):
                return record, Outcome.wait(0)  # (its commit loses: see moved_on)
            if record.verified_at is not None:
                log.warning(
                    "the lifecycle action of %s lapsed before this step: nothing is disrupted",
                    record.instance_id,
                )
                return record, expired_before_completion(record, self._records)  # (counted: see gone_counted)
            # A launch whose instance Auto Scaling terminated before this first step (a scale-in right after the
            # scale-out, a Spot instance reclaimed at once) finds its action ended with it, as a forged pair
            # finds none: only where the instance is tells them apart (see ``instance_left``). The heartbeat is
            # asked again then: the confirmation also fails for an action that is active where its instance is
            # not where a launch's holds it (the live token of the instance's terminate action, named as its
            # launch), which is no launch ended with its instance. (A TransientError from either retries the
            # step, rather than page for an action that may be neither.)
            # (counted once its commit lands: see gone_counted)
            return record, not_confirmed(record, now, self._autoscaling)
        # (renewed as of Auto Scaling's answer when this function's clock runs ahead of it: see Autoscaling.renewed_at)
        return record.renewed(self._autoscaling.renewed_at(now), verified_at=now), None

    def _guard(self, record: LifecycleRecord, now: datetime) -> Outcome | None:
        """Complete the action before its global timeout, whatever the current step is still waiting for. An
        action no step confirmed is asked first (see ``confirmed_near_its_timeout``): one Auto Scaling does not
        have is no action near its global timeout, and is not taken for one."""
        if not record.action_open or record.step in (Step.COMPLETE, Step.CLEANUP):
            return None
        if now < record.global_deadline - self._timing.settle_before:
            return None
        confirmed, unknown = confirmed_near_its_timeout(record, now, self._autoscaling)
        if unknown is not None:
            return unknown  # (counted once its commit lands: see gone_counted)
        log.error("global timeout of the lifecycle action is near: completing it now")
        # (counted once its commit lands: see _run_step; the confirmation's renewal, if it asked one, with it)
        return Outcome.goto(
            Step.COMPLETE,
            plan=completed_first(record),
            result=self._failure_result(record),
            outcome="global-timeout-near",
            **_renewal(record, confirmed),
        )

    def _keep_alive(
        self,
        record: LifecycleRecord,
        now: datetime,
        completion_unanswered: bool = False,
        renewed_at: datetime | None = None,
        heartbeat_failed: bool = False,
        read_seq: int | None = None,
    ) -> LifecycleRecord:
        """Heartbeat only when the hook's deadline needs it: when the next run, or its retry after one fault,
        could come too late to heartbeat itself. Never let the next step come later than that, nor later than
        the point where the guard must complete the action.

        The next run starts by ``due_at`` and, after one fault, by ``due_at + redelivery``; it needs
        ``heartbeat_margin`` to run and record its own heartbeat. So a heartbeat is recorded now exactly when
        ``due_at`` reaches ``heartbeat_deadline - margin - redelivery``, and a wait longer than that is cut
        into pieces, each with its heartbeat. The completion too: a completion throttled again and again
        backs off for minutes, and an action that expires meanwhile gets the hook's default result.

        ``completion_unanswered``: the step that ran was a completion whose call failed without a refusal. If
        it landed, Auto Scaling answers the heartbeat that the action is no longer active: that is no expiry,
        and the completion's retry settles it (with its result) either way. ``renewed_at``: when the step's
        confirmation (``_verify``) recorded a heartbeat in this run: another one sooner than
        ``HEARTBEAT_RETRY_MIN`` after it would extend nothing. ``heartbeat_failed``: that heartbeat failed
        (throttled): it is not asked again at once, only retried as a failed heartbeat is. ``read_seq``: the
        seq the run read (see ``moved_on``)."""
        if not record.action_open or record.step in (Step.CLEANUP, Step.DONE):
            return record
        latest = record.global_deadline - self._timing.settle_before
        if record.due_at > latest:
            # never wait past the point where the guard must complete the action; past it (the completion,
            # retried after throttling), keep its backoff, but ask again a margin before the global timeout
            cap = latest if now < latest else record.global_deadline - self._timing.heartbeat_margin
            record = record.model_copy(update={"due_at": max(now, min(record.due_at, cap))})
        if record.heartbeat_deadline >= record.global_deadline:
            return record  # the action ends before any heartbeat could matter
        just_renewed = renewed_at is not None and now - renewed_at < HEARTBEAT_RETRY_MIN
        if max(record.due_at, now) >= self._last_safe_run(record) and not just_renewed:  # heartbeat at once
            waiting = record.heartbeat_retry_at
            # (a run due at the backoff's end may start up to a second before it, as a message runs that is due
            # within a second: that run asks)
            if heartbeat_failed or (waiting is not None and waiting - now > timedelta(seconds=1)):
                # Not asked again now: the step's confirmation asked a moment ago and was throttled, or a heartbeat
                # failed before and its backoff is not over (a drain polls every few seconds: asked at each poll,
                # a throttled API would be asked as often as the drains poll, whatever the backoff)
                retry_at = (
                    self._heartbeat_retry(record, now) if heartbeat_failed or waiting is None else waiting
                )
                return record.model_copy(
                    update={"due_at": min(record.due_at, retry_at), "heartbeat_retry_at": retry_at}
                )
            # (an action no step confirmed yet is heartbeated through the confirmation, which looks where the
            # instance is first: a token Auto Scaling may take named with another group than its action's, another
            # stack's, is not kept alive for a message that named this stack's group with it)
            beat = (
                self._autoscaling.confirm
                if record.verified_at is None and record.token_known
                else self._autoscaling.heartbeat
            )
            try:
                active = beat(record.action)
            except TransientError as error:
                retry_at = self._heartbeat_retry(record, now)
                if isinstance(error, AccessRefused):
                    # A denial is no throttle: it lasts as long as a policy says so, and the action lapses at
                    # its heartbeat deadline unless the sweeper's heartbeat is allowed. Told as an error, and
                    # counted in its own series (as a refused step's), to graph apart from throttling's.
                    log.error(
                        "heartbeat refused, retrying in %.0f s (the action lapses at %s unless one is "
                        "accepted): %s",
                        (retry_at - now).total_seconds(),
                        record.heartbeat_deadline.isoformat(),
                        error,
                    )
                    self._metrics.count("HeartbeatRetries", reason="refused")
                else:
                    log.warning(
                        "heartbeat failed, retrying in %.0f s: %s", (retry_at - now).total_seconds(), error
                    )
                    self._metrics.count("HeartbeatRetries")
                    if now >= self._throttled_late_from(record):
                        self._metrics.count("HeartbeatsThrottledLate")
                return record.model_copy(
                    update={"due_at": min(record.due_at, retry_at), "heartbeat_retry_at": retry_at}
                )
            if not active and completion_unanswered:
                log.info("the lifecycle action is no longer active: perhaps completed by the call unanswered")
                return record  # (its retry, at its backoff, is told so too, and records the completion)
            if not active and read_seq is not None and moved_on(self._records, record.id, read_seq):
                return record  # (its commit loses: see moved_on)
            if not active:
                ended = action_lapsed(record, now, self._autoscaling, self._records)
                expired = advance(record, ended, now)
                return expired.model_copy(update={"seq": record.seq})  # the step's own advance took this seq
            self._metrics.count("Heartbeats")
            # (as of Auto Scaling's answer when this function's clock runs ahead of it: a deadline recorded later than
            # Auto Scaling's would have every run after this one, on a clock that is right, heartbeat too late)
            record = record.renewed(self._autoscaling.renewed_at(now))
        if record.heartbeat_deadline < record.global_deadline and record.due_at > self._last_safe_run(record):
            # a wait longer than the heartbeat deadline allows is cut into pieces, each with its heartbeat
            cut = self._last_safe_run(record)
            if cut <= now:
                # a hook whose heartbeat timeout is shorter than the margin plus the redelivery leaves no room
                # for a fault (intake warns about it): the next run only has to come a margin before the
                # deadline, or, with a timeout shorter than the margin, half way to it; not every second
                cut = max(
                    record.heartbeat_deadline - self._timing.heartbeat_margin,
                    now + (record.heartbeat_deadline - now) / 2,
                )
            # a cut only ever brings the next run closer, never past what the step asked for
            record = record.model_copy(update={"due_at": min(record.due_at, max(now + MIN_PIECE, cut))})
        return record

    def _last_safe_run(self, record: LifecycleRecord) -> datetime:
        """The latest due time of a next run that, even retried after one fault, still heartbeats in time."""
        return record.heartbeat_deadline - self._timing.heartbeat_margin - self._timing.redelivery

    def _throttled_late_from(self, record: LifecycleRecord) -> datetime:
        """From when a throttled heartbeat is late (``HeartbeatsThrottledLate``, what the throttled heartbeats'
        alarm pages on): the throttle outlasted the engine's first full retry past the last safe run (half a
        fault's retry later), and the action is inside its last margin and half a retry. The first keep-alive
        try comes up to a poll before the last safe run and its retry a few seconds after it: two throttled
        tries there are one throttle the backoff is still working through, wherever a minute ends between them."""
        return record.heartbeat_deadline - self._timing.heartbeat_margin - self._timing.redelivery / 2

    def _heartbeat_retry(self, record: LifecycleRecord, now: datetime) -> datetime:
        """When to try a failed (throttled) heartbeat again: half way to the last moment that still leaves
        room for a fault, or, past it, half way to the last moment a heartbeat keeps the action alive; never
        sooner than ``HEARTBEAT_RETRY_MIN``. Each failure halves what is left, so a throttled API is asked
        a few times, not every few seconds, and the action is still renewed before its deadline."""
        margin = self._timing.heartbeat_margin
        target = record.heartbeat_deadline - margin - self._timing.redelivery
        if target <= now:
            target = record.heartbeat_deadline - margin
        return now + max(HEARTBEAT_RETRY_MIN, (target - now) / 2)


def advance(record: LifecycleRecord, outcome: Outcome, now: datetime) -> LifecycleRecord:
    """The record after ``outcome``, under the next ``seq``."""
    changes: dict[str, Any] = dict(outcome.changes)
    step = record.step if outcome.again else outcome.then or following(record, record.step)
    # A step that ran is progress: the retry counts (set again by the transient-error path) and the count of
    # resumes (how many lost messages in a row) start over.
    changes.setdefault("attempts", 0)
    changes.setdefault("refusals", 0)
    changes.setdefault("resumes", 0)
    changes.update(
        step=step, seq=record.seq + 1, updated_at=now, due_at=now + timedelta(seconds=outcome.delay)
    )
    if step is Step.DONE:
        changes["finished_at"] = now
    return record.model_copy(update=changes)


def moved_on(records: RecordStore, record_id: str, read_seq: int) -> bool:
    """Whether the lifecycle moved on from the seq a run read (the engine's, or a sweep's), asked when a
    heartbeat finds its action gone, before that is counted an expiry: another completer of ours claimed the
    record and completed the action between that read and the heartbeat (the sweeper's settlement at the
    action's last chance, the engine's completion run inline), and its "no active lifecycle action" is that
    completion's. The run's own write, conditional on the seq it read, loses; the lifecycle is the other one's.

    A record gone is not moved on: nothing of ours deletes a record (its TTL does, days after it is over), so
    no completion of ours explains the action gone, and the expiry is told (its alarm). A read that fails (any
    failure: one that is not AWS's too, with its traceback) tells nothing: judged as read."""
    try:
        current = records.get(record_id)
    except Exception as error:
        log.warning(
            "could not read lifecycle %s again (%r): judged as read",
            record_id,
            error,
            exc_info=not isinstance(error, TransientError),
        )
        return False
    return current is not None and current.seq != read_seq


def settled_elsewhere_counted(read: LifecycleRecord, committed: LifecycleRecord, metrics: Metrics) -> None:
    """Count ``LifecycleActionsSettledElsewhere`` for a completion whose commit landed (``committed``, from the
    record as its completer ``read`` it) that found the action settled. Counted by the completion itself, it was
    counted also by a completer outrun by another of ours: at the last sweep before the global timeout the sweep
    takes over a claim a margin after it was made, and the engine whose call was still on its way (throttled past
    the margin) was told "no active lifecycle action" by the sweep's call, which landed first; its commit loses to
    the sweep's, which records the completion as the sweep's, and nobody else settled the action."""
    if committed.extra.get(SETTLED_ELSEWHERE) and not read.extra.get(SETTLED_ELSEWHERE):
        metrics.count("LifecycleActionsSettledElsewhere", transition=read.transition.short)


def expired_before_completion(record: LifecycleRecord, records: RecordStore) -> Outcome:
    """Past the completion of an action found gone (timed out, or completed elsewhere) before its lifecycle
    completed it. A completion cut short after it wrote its instance's state-change lifecycle over (killed, or
    its call throttled: see ``completion.ended_by``) is told so, as its commit would have: EC2's state changes
    of the termination start nothing, and its cleanup frees what their lifecycle would have. (Read only then:
    no other step writes it.) A drain that its cleanup may carry over to the action its instance's hook holds has
    its expiry told by that cleanup (EXPIRY_UNTOLD: see ``gone_counted``)."""
    extra = record.extra
    if record.step is Step.COMPLETE and not extra.get(ENDS_ITS_INSTANCE):
        told = records.get(record.state_change_id)
        if told is not None and told.written_over_by(record.id):
            extra = {**extra, ENDS_ITS_INSTANCE: True}
    if may_carry_over(record):
        extra = {**extra, EXPIRY_UNTOLD: True}
    return Outcome.goto(after_completion(record), outcome="action-expired", extra=extra)


def action_lapsed(
    record: LifecycleRecord, now: datetime, autoscaling: Autoscaling, records: RecordStore
) -> Outcome:
    """Past an action Auto Scaling no longer has, found so by a heartbeat (the engine's, or the sweeper's
    keep-alive): a launch that ended with its instance, or else an expiry (counted once its commit lands: see
    ``gone_counted``)."""
    ended = ended_with_its_instance(record, now, autoscaling)
    if ended is not None:
        return ended
    log.warning(
        "the lifecycle action of %s is no longer active (timed out, or completed elsewhere)", record.id
    )
    return expired_before_completion(record, records)


def confirmed_near_its_timeout(
    record: LifecycleRecord, now: datetime, autoscaling: Autoscaling
) -> tuple[LifecycleRecord, Outcome | None]:
    """``record`` as the guard, or the sweeper's settlement, finds it near its action's global timeout: an action no
    step confirmed (its queue stalled since its event, or a message dated so) is confirmed first, and returned
    renewed (``verified_at``); one Auto Scaling does not confirm where its instance is ends as the unknown action it
    is (a forged pair dated half a minute before its global timeout, taken in before its token's true event), or as
    a launch that ended with its instance, with the Outcome that says so. Settled near its global timeout instead,
    it paged ``GlobalTimeoutsNear`` and was counted as settled elsewhere: an operator looked for a stalled drain that
    never was. Not answered (throttled, refused, the instance not yet where its action holds it): the record as it
    was, left to the completion, which asks again before it calls (``CompleteAction._confirmed``)."""
    if not record.transition.has_hook or not record.token_known or record.verified_at is not None:
        return record, None
    try:
        if autoscaling.confirm(record.action):
            return record.renewed(autoscaling.renewed_at(now), verified_at=now), None
        return record, not_confirmed(record, now, autoscaling)
    except TransientError as error:
        log.info(
            "could not confirm the lifecycle action near its global timeout (its completion asks again): %s",
            error,
        )
        return record, None


def not_confirmed(record: LifecycleRecord, now: datetime, autoscaling: Autoscaling) -> Outcome:
    """Where a lifecycle goes whose action Auto Scaling did not confirm at its first confirmation (``_verify``'s, or
    near its global timeout): a launch that ended with its instance (the heartbeat asked again: a confirmation also
    fails for an action active where its instance is not where a launch's holds it), else the unknown action it is,
    nothing disrupted nor completed. Raises TransientError when Auto Scaling or EC2 does not answer."""
    gone = _ended_with_its_instance(record, now, autoscaling)
    if gone is not None and not autoscaling.heartbeat(record.action):
        return gone
    log.warning(
        "Auto Scaling has no active lifecycle action with this token for %s: nothing is disrupted nor completed",
        record.instance_id,
    )
    return Outcome.goto(after_completion(record), outcome="unknown-action")


def _renewal(record: LifecycleRecord, confirmed: LifecycleRecord) -> dict[str, Any]:
    """The fields a confirmation renewed on ``confirmed`` (none when it asked none), to carry in an Outcome."""
    if confirmed is record:
        return {}
    fields = ("verified_at", "heartbeat_deadline", "heartbeats", "heartbeat_retry_at")
    return {name: getattr(confirmed, name) for name in fields}


def _guard_decided(read: LifecycleRecord, written: LifecycleRecord) -> bool:
    """Whether ``written`` records the guard's decision near the action's global timeout (``GlobalTimeoutsNear``)."""
    return written.outcome == "global-timeout-near" and read.outcome != written.outcome


def landed_after_all(records: RecordStore, written: LifecycleRecord) -> bool:
    """Whether a commit of ``written`` that raised landed all the same (its record read back as written); a read that
    fails says so too: a page counted twice rather than none (see gone_counted)."""
    try:
        return records.get(written.id) == written
    except Exception as error:
        log.warning("could not read lifecycle %s back (%r): its page counted", written.id, error)
        return True


def gone_counted(
    records: RecordStore,
    read: LifecycleRecord,
    written: LifecycleRecord,
    landed: bool | None,
    metrics: Metrics,
) -> None:
    """Count the page of an action found gone (``LifecycleActionsExpired``; ``LifecycleActionsUnknown``, one Auto
    Scaling never had with this token) by the write that records the lifecycle past it (``written``, from the
    record as its writer ``read`` it), once that write ``landed``. The pages are written out as counted
    (observability.PAGES): counted before the commit, a run killed or whose commit was refused paged it, and its
    delivery again, finding the action gone again, paged it a second time; so did each of two writers (two
    deliveries at once, the engine and a sweep) that found it gone, when only one commit lands. A write that lost
    to a record gone (deleted by hand: nothing of ours deletes one before its TTL) pages all the same: no writer
    records the expiry then (a read that fails: counted too, a page twice rather than none). A write whose
    outcome is unknown (``landed`` None: it raised, a TransientError of a 500 at every attempt after one that
    landed, or of an attempt its run's time did not allow after a read timeout) is read back: the record as it
    wrote it, it landed and this writer counts it, as its delivery again finds the record moved on (stale) and
    counts nothing; otherwise that delivery, or the writer whose commit landed, does.

    An expiry left untold (EXPIRY_UNTOLD: a drain its cleanup may carry over) is told by the cleanup's write that
    decides it, the same way: expired when nothing was carried over, LifecycleActionsCarriedOver (no page: the
    drain goes on for the instance's own action, which its completion settles) when it was."""
    told = _told_of(read, written)
    if told is None:
        return
    if landed is None:
        if not landed_after_all(records, written):
            return
    elif not landed:
        try:
            if records.get(read.id) is not None:
                return  # (the writer whose commit landed counts it, if it found the action gone too)
        except Exception as error:
            log.warning("could not read lifecycle %s again (%r): its page counted", read.id, error)
    # (each by its name: the template's checks read what the code emits from its calls)
    if told == "LifecycleActionsCarriedOver":
        metrics.count("LifecycleActionsCarriedOver")
    elif told == "LifecycleActionsExpired":
        metrics.count("LifecycleActionsExpired")
    else:
        metrics.count("LifecycleActionsUnknown")


def _told_of(read: LifecycleRecord, written: LifecycleRecord) -> str | None:
    """What the write of ``written`` over ``read`` tells of an action found gone (see ``gone_counted``); None:
    nothing."""
    if written.outcome != read.outcome and written.outcome in ("action-expired", "unknown-action"):
        if written.outcome == "unknown-action":
            return "LifecycleActionsUnknown"
        return None if written.extra.get(EXPIRY_UNTOLD) else "LifecycleActionsExpired"
    if read.extra.get(EXPIRY_UNTOLD) and not written.extra.get(EXPIRY_UNTOLD):
        return "LifecycleActionsCarriedOver" if written.extra.get(CARRIED_OVER) else "LifecycleActionsExpired"
    return None


# Auto Scaling's lifecycle states (prefixes) of an instance it is terminating, out of its group or its warm
# pool: a launch action of the instance ends with them (see ``instance_left``). (The drain cleanup's
# NOT_COMING_BACK_STATES, a wider set, says whether a drained node's instance comes back to service.)
TERMINATION_STATES = ("Terminating", "Warmed:Terminating", "Terminated", "Warmed:Terminated")
# The prefix of every state of a warm pool's instance: on its way into the pool, waiting there, or leaving it
POOL_STATES = "Warmed:"


def left_its_group(record: LifecycleRecord, state: str) -> bool:
    """Whether an instance in Auto Scaling's lifecycle ``state`` has left the group that ``record``'s launch was
    taking it into, its launch action ended with the move: terminating (or terminated), or, for a launch into the
    group, in its warm pool. A scale-in with ReuseOnScaleIn sends an instance not yet in service back to the pool
    too (held running in Warmed:Pending:Wait by the terminate hook, then stopped or kept running there), as a
    scale-in without it terminates one: taken for an instance still there, its launch took a pool's address it
    then kept, stopped in the pool, out of the sweeper's reach, and a heartbeat that found the action gone paged
    as an expiry. A launch into the pool is held there by its own action (Warmed:Pending:Wait): not so."""
    if state.startswith(TERMINATION_STATES):
        return True
    return state.startswith(POOL_STATES) and record.destination != WARM_POOL


def ended_with_its_instance(
    record: LifecycleRecord, now: datetime, autoscaling: Autoscaling
) -> Outcome | None:
    """The end of a launch whose action Auto Scaling no longer has, when its instance is leaving the group (or
    has left it) before any of the action's timeouts: Auto Scaling ends the launch action of an instance it
    terminates (a scale-in, TerminateInstanceInAutoScalingGroup, an operator, a Spot instance reclaimed) at once,
    while EC2 may say running for as long as terminate hooks hold it. Nothing nodecycle did let it lapse: no
    expiry to count (the expired-actions alarm), and its instance's terminate lifecycle frees what it holds.
    None for any other action gone: a drain's, or a launch's past its heartbeat deadline (timed out, perhaps,
    its default ABANDON terminating the instance: an expiry), or whose instance stays (completed by hand), or
    that nothing shows was the group's (see ``instance_left``), or when Auto Scaling or EC2 does not say now."""
    try:
        return _ended_with_its_instance(record, now, autoscaling)
    except TransientError as error:
        log.info("could not tell where instance %s is (taken as expired): %s", record.instance_id, error)
        return None


def _ended_with_its_instance(
    record: LifecycleRecord, now: datetime, autoscaling: Autoscaling
) -> Outcome | None:
    """``ended_with_its_instance``, raising TransientError when Auto Scaling or EC2 does not answer now."""
    if record.transition is not Transition.LAUNCHING or now >= min(
        record.heartbeat_deadline, record.global_deadline
    ):
        return None
    gone = instance_left(record, autoscaling)
    if gone is None:
        return None
    log.warning(
        "the launch action of %s ended with its instance (%s): the launch ends", record.instance_id, gone
    )
    return Outcome.goto(after_completion(record), outcome="instance-gone")


def instance_left(record: LifecycleRecord, autoscaling: Autoscaling) -> str | None:
    """Where the instance of ``record`` has gone, when it is shown leaving (or gone from) the record's group;
    None when it is not, or nothing shows it. Raises TransientError when Auto Scaling or EC2 does not answer.

    What shows it depends on whether the group was seen holding the instance for this lifecycle: its action
    confirmed (a heartbeat accepted, the instance waiting where the action holds it) or adopted (the sweeper
    found it held in the group's listing). Then an instance that no group lists any more has left the group
    (Auto Scaling forgets an instance once it is terminated): one DescribeAutoScalingInstances. Never seen there
    (its token refused at its first confirmation, or not asked yet), only the message said the instance was the
    group's, and anyone who can write to the intake queue can say so: the group that lists it must be the
    record's, and for one no group lists, EC2 must show it going (shutting down, terminated) with the record's
    group in the tag Auto Scaling gave it at launch (EC2 describes a terminated instance for about an hour; the
    first step of a launch runs seconds after its event). An instance of another group, of none, unknown to EC2
    (an id made up, or terminated long ago) or still there is none of these: its action is unknown (a forged or
    foreign pair, or a token Auto Scaling never issued: the alarm). No API tells a token after the fact: a made-up
    token paired with an instance of the group that the group is terminating ends as gone too, and it is one
    for which nothing is left to disrupt."""
    if record.verified_at is not None or not record.token_known:
        state = autoscaling.lifecycle_state(record.instance_id)
        if state is None:
            return "in no group any more"
        return state if left_its_group(record, state) else None
    where = autoscaling.membership(record.instance_id)
    if where.group != record.group:
        return None
    if where.lifecycle_state is not None:
        return where.lifecycle_state if left_its_group(record, where.lifecycle_state) else None
    return f"{where.ec2_state} in EC2" if where.ec2_state in GONE_STATES else None


def _refused_to_the_last(
    record: LifecycleRecord, message: WorkMessage, now: datetime, timing: EngineTiming
) -> bool:
    """Whether ``message`` is a completion's that failed refused to its last try (``MAX_REFUSED_ATTEMPTS``), or
    one like it: the record still at that completion, no completer's claim at work on it."""
    return (
        message.step is Step.COMPLETE
        and record.step is Step.COMPLETE
        and record.refusals >= MAX_REFUSED_ATTEMPTS
        and not completion_in_progress(record, now, timing.heartbeat_margin)
    )


def _successor_of(record: LifecycleRecord, now: datetime) -> LifecycleRecord:
    """A lifecycle done with a successor (another maintenance of the instance, told of while it ran: one
    record per instance and cause) is followed by it on the same record, under the same next ``seq``."""
    if record.step is not Step.DONE:
        return record
    successor = record.successor
    if successor is None:
        return record
    log.info("lifecycle %s done: the next one of its instance starts", record.id)
    following = record.followed_by(successor)
    return following.model_copy(update={"seq": record.seq, "updated_at": now})
