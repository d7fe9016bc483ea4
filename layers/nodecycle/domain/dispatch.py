"""The work messages of lifecycles: the message of a record's current step sent (or sent again), and a waiter
woken when a budget slot is freed for it (:class:`Dispatcher`).

Apart from the step engine (:mod:`.engine`), which runs the steps: intake only sends each new lifecycle's
first message, and imports none of the engine's steps' modules (the addresses' lines, the cluster's ports)
at its cold start (``python -m benchmarks --only cold``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta

from nodecycle.domain.flow import Worker, worker_for, worker_of
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.lifecycle import RecordStore, WorkMessage, WorkQueues
from nodecycle.domain.ports.runtime import Clock, Metrics

MAX_DELAY = 900  # SQS DelaySeconds limit: longer waits are chained


def waits_for_slot(record: LifecycleRecord) -> bool:
    """A lifecycle a freed budget slot may move on: a waiter, or a drain paused because it lost its slot
    (it asks for it back with precedence, and must not sit idle until its retry once one is free): at its poll, or
    at its cordon again (its node uncordoned under it, or registered again)."""
    return record.step is Step.ACQUIRE_SLOT or (
        record.step in (Step.EVICT, Step.CORDON) and record.drain_paused_at is not None
    )


# record.extra key of a lifecycle whose step freed a slot and kept the waiter it passed the slot on to, to run that
# waiter's step in the same invocation (see ``HandOver``): {"record": the waiter's record id, "token": its token,
# "message_seq": the seq of the message that invocation was delivered}. Written with the engine's commit of that
# step; gone at the lifecycle's next commit that keeps none. What the invocation's message, delivered again, reads to find the
# waiter it may have left without a message (see ``HandOver.kept_by``).
HANDED_OVER = "handed_over"


@dataclass
class HandOver:
    """The waiter an engine's invocation runs itself once the step it runs now has freed a slot for it.

    The waiter's step then runs in an invocation whose message is not the waiter's: killed after the waiter's
    commit and before its next message, the invocation leaves the waiter no message, and its own message, delivered
    again, finds its own lifecycle moved on. When the waiter's own chain was cut before (its container killed
    between its "wait in line" commit and its retry's message), nothing else would run it until the sweeper, its
    slot held idle meanwhile. So the step that keeps a waiter says so in its own commit (``HANDED_OVER``), and
    the invocation's message, delivered again, looks after that waiter (see ``StepEngine``)."""

    worker: Worker  # the engine's: it runs only a step of its own worker
    running: str  # the record id of the lifecycle it runs (woken itself only when its commit lost)
    time_left: Callable[[], float]
    inline_budget: float
    waiter: LifecycleRecord | None = None
    seq: int | None = None  # the seq of the message the invocation was delivered (None: not told)

    @staticmethod
    def kept_by(record: LifecycleRecord, message_seq: int) -> tuple[str, str] | None:
        """The waiter (its record id and token) whose step the invocation of the message of ``message_seq`` kept to
        run itself, as ``record`` tells: None when that invocation kept none, or the record does not tell."""
        mark = record.extra.get(HANDED_OVER)
        if not isinstance(mark, dict) or mark.get("message_seq") != message_seq:
            return None
        waiter, token = mark.get("record"), mark.get("token")
        if not isinstance(waiter, str) or not isinstance(token, str):
            return None
        return waiter, token

    def take(self, waiting: LifecycleRecord) -> bool:
        """Keep ``waiting`` to run here, if it is the first that this invocation can run."""
        if (
            self.waiter is not None
            or waiting.id == self.running
            or worker_of(waiting, self.worker) is not self.worker
            or self.time_left() <= self.inline_budget
        ):
            return False
        self.waiter = waiting
        return True


def marked_for_hand_over(
    hand_over: HandOver | None, record: LifecycleRecord, updated: LifecycleRecord
) -> LifecycleRecord:
    """``updated`` (what the step of ``record`` commits) telling the waiter the invocation keeps to run itself, if
    that step kept one (``hand_over``: the invocation's); else without the mark an earlier step left."""
    waiter = None if hand_over is None or record.id != hand_over.running else hand_over.waiter
    if hand_over is not None and waiter is not None and hand_over.seq is not None:
        mark = {"record": waiter.id, "token": waiter.token, "message_seq": hand_over.seq}
        return updated.model_copy(update={"extra": {**updated.extra, HANDED_OVER: mark}})
    if HANDED_OVER not in updated.extra:
        return updated
    return updated.model_copy(update={"extra": {k: v for k, v in updated.extra.items() if k != HANDED_OVER}})


# The hand-over of the step an engine runs now (see ``engine.StepEngine.handle``); None outside a step (the sweeper's
# and intake's wake-ups are all sent).
hand_over_now: ContextVar[HandOver | None] = ContextVar("hand_over", default=None)


def not_asking_yet(record: LifecycleRecord, now: datetime) -> bool:
    """A lifecycle at ACQUIRE_SLOT that has not asked for a slot and is due later (a maintenance's, days
    ahead): no wake-up brings it forward. (A first ask in flight is due already.)"""
    return (
        record.step is Step.ACQUIRE_SLOT
        and record.slot_waiting_since is None
        and record.due_at - now > timedelta(seconds=1)
    )


class Dispatcher:
    """Sends the work message of a record's current step, re-sends one that was lost, and wakes a lifecycle
    waiting for a budget slot when one is freed for it."""

    def __init__(self, *, records: RecordStore, queues: WorkQueues, clock: Clock, metrics: Metrics) -> None:
        self._records = records
        self._queues = queues
        self._clock = clock
        self._metrics = metrics

    def send(self, record: LifecycleRecord, now: datetime, here: Worker | None = None) -> None:
        """Send the message of the record's current step, from worker ``here`` (None: from elsewhere)."""
        delay = max(0, min(MAX_DELAY, round((record.due_at - now).total_seconds())))
        message = WorkMessage(record_id=record.id, seq=record.seq, step=record.step)
        self._queues.send(worker_of(record, here), message, delay_seconds=delay)

    def watch(
        self, record: LifecycleRecord, now: datetime, grace: timedelta, here: Worker | None = None
    ) -> None:
        """Send a watch of the record's current step: it comes back once the step is ``grace`` overdue, and
        sends the step again if nothing moved (a message lost) or finds it stale (see ``Engine._check``)."""
        check_in = record.due_at + grace - now + timedelta(seconds=1)
        watch = WorkMessage(record_id=record.id, seq=record.seq, step=record.step, watch=record.seq)
        self.send_again(record, watch, delay_seconds=math.ceil(check_in.total_seconds()), here=here)

    def send_again(
        self, record: LifecycleRecord, message: WorkMessage, delay_seconds: int, here: Worker | None = None
    ) -> None:
        self._queues.send(
            worker_for(record.plan, message.step, here),
            message,
            delay_seconds=max(0, min(MAX_DELAY, delay_seconds)),
        )

    def wake(self, record_id: str, token: str | None = None) -> None:
        """Send a waiting lifecycle its next message at once: a budget slot it may take has been freed. Only
        the lifecycle of ``token``, when given (the record may have started over under another since)."""
        waiting = self._records.get(record_id)
        if (
            waiting is None
            or not waits_for_slot(waiting)
            or token not in (None, waiting.token)
            or not_asking_yet(waiting, self._clock.now())
        ):
            return
        hand_over = hand_over_now.get()
        # (one kept is run by the engine's invocation once the step that woke it is committed)
        if hand_over is None or not hand_over.take(waiting):
            self.send_wake(waiting)
        self._metrics.count("WaitersWoken")  # (after the send: one SQS refused woke nobody)

    def wake_each(self, record_ids: Iterable[str]) -> None:
        """Wake each of the waiters a release passed slots on to, then raise the first wake-up that failed (the
        release's retry wakes it again: see rules.passed_on). Stopping at the first refusal left every slot passed
        on after it idle until that retry."""
        failed: Exception | None = None
        for record_id in record_ids:
            try:
                self.wake(record_id)
            except Exception as error:  # (raised below, once every waiter was tried)
                failed = failed or error
        if failed is not None:
            raise failed

    def wake_cleanup(self, record_id: str) -> None:
        """Send a lifecycle watching its node after its cleanup its next look at once: what its watch waits for
        has come (its instance left the warm pool). The look decides, as at its own pace; only sooner."""
        watching = self._records.get(record_id)
        if watching is None or watching.finished or watching.step is not Step.CLEANUP:
            return
        self.send_wake(watching)

    def send_wake(self, record: LifecycleRecord) -> None:
        """The record's current step at once, marked as a wake-up: through the wake lane, not the drain queue,
        where it would wait behind every poll queued there. A message with no delay next to the waiter's
        backoff message, marked to run before its due time: the first to run takes the slot and moves the
        record on; the other one arrives stale."""
        wake = WorkMessage(
            record_id=record.id, seq=record.seq, step=record.step, wake=True, token=record.token
        )
        self._queues.send(Worker.WAKE, wake)

    def resume(self, record: LifecycleRecord) -> bool:
        """Re-send the current step of a record whose message was lost.

        The step moves to a new ``seq`` first, so that if the old message was only late, not lost, it
        arrives stale and the lifecycle still has a single chain of work.
        """
        now = self._clock.now()
        resumed = record.model_copy(
            update={"seq": record.seq + 1, "resumes": record.resumes + 1, "updated_at": now, "due_at": now}
        )
        if not self._records.commit(resumed, expected_seq=record.seq):
            return False
        self._metrics.count("LifecyclesResumed")
        self.send(resumed, now)
        return True
