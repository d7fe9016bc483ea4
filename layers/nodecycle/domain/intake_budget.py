"""Intake within one invocation's time.

An event tells of one instance, but for AWS Health, whose scheduled-maintenance event names every instance it
affects (hundreds, for a hardware fleet's retirement): each of this stack's takes a few AWS calls (its
maintenance from EC2, a record write, a message), a tenth of a second or more in AWS. Taken in one after the
other up to the function's timeout, a large event would be cut off mid-call, and each retry would start over
(a duplicate costs the same look-ups) and be cut off at the same place: the event would reach the dead-letter
queue with its last instances never taken in.

So an instance is started only while enough time is left to finish it; an event cut short saves how many of
its instances (in their order, which the event's parsing fixes) were taken in, and fails: its retry (Lambda's
for an asynchronous invocation, the queue's for a record) continues from there. Each instance's intake is
idempotent anyway (one record per instance and cause): a crash before the save repeats work, loses none.

An instance whose intake fails for good (no TransientError: its record written by a newer release before a
rollback, or edited by hand, which this one cannot read; a write DynamoDB refuses; a bug) does not hold back
the instances named after it: they are taken in, then the event fails with that first error (logged, retried,
then dead-lettered, its alarm), its progress saved up to that instance, so that its retry, and a redrive once
an operator repaired it, come back to it (the others after it taken in again as duplicates). Stopped there,
the event's later instances, a fleet's retirement, went to their maintenance undrained at every retry. A
TransientError still stops the event at once: throttled, refused or out of time, the others would meet it too.

Why not split the event into messages of a few instances each, sent to the intake queue: what comes by the
queue is trusted less than what EventBridge delivers (anyone allowed to send to it can forge an event), so a
maintenance EC2 does not list yet would be drained for by the event's first part and not by its others; and
the parts would loop through intake's own queue (which it sends to only to hand over an EventBridge event retried
on purpose, once), a loop Lambda's recursion detection watches.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta

from nodecycle.domain.errors import TransientError
from nodecycle.domain.model import DisruptionEvent, LifecycleEvent
from nodecycle.domain.ports.lifecycle import IntakeProgress
from nodecycle.domain.ports.runtime import Clock

log = logging.getLogger(__name__)

# Of the intake function's 30 s: an instance's calls take well under a second in AWS; the rest is room for
# their retries when throttled (botocore's standard mode backs off for seconds) and for saving the progress.
RESERVE = timedelta(seconds=10)


class OutOfTime(TransientError):
    """Instances of the event remain and too little time is left to take in another: retried, continuing."""


def progress_key(events: Sequence[LifecycleEvent | DisruptionEvent], owner: str | None = None) -> str | None:
    """The key of an event's progress: its id and the instances it names (a delivery of another version of
    the event, or a forged one under its id, does not skip instances this one names), under ``owner``: every
    stack takes in the same AWS Health event, each its own instances of it and the others' as not its own, so
    one stack's progress is no other's (two stacks writing one table, by mistake, would otherwise skip the
    instances the first took in, its own among them, at the second's retry). None for an event of one
    instance, which has no progress to save."""
    if len(events) < 2 or not isinstance(events[0], DisruptionEvent):
        return None
    names = hashlib.sha256(",".join(event.instance_id for event in events).encode()).hexdigest()[:16]
    key = f"{events[0].event_id}#{names}"
    return key if owner is None else f"{owner}#{key}"


class IntakeBudget:
    def __init__(
        self,
        progress: IntakeProgress,
        clock: Clock,
        reserve: timedelta = RESERVE,
        *,
        owner: str | None = None,
    ) -> None:
        """``owner``: the stack's owner id, under which its progress is saved (see ``progress_key``)."""
        self._owner = owner
        self._progress = progress
        self._clock = clock
        self._reserve = reserve.total_seconds()

    def take_in[E: LifecycleEvent | DisruptionEvent](
        self, events: Sequence[E], accept: Callable[[E], str], time_left: Callable[[], float]
    ) -> list[str]:
        """The outcome of ``accept`` for each of ``events`` not taken in by an earlier delivery; raises
        :class:`OutOfTime` when some remain and ``time_left`` (seconds) is too short to start another."""
        key = progress_key(events, self._owner)
        if events:
            # Before anything is read: a record of a batch reached with too little time left goes back to the
            # queue untouched, rather than spend the reserve on reads for instances it will not start (its
            # progress here; the facts of its instances, which the caller reads at the first ``accept``).
            self._time_for_another(events, time_left)
        start = self._progress.progress(key) if key is not None else 0
        if start:
            log.info(
                "continuing an event cut short: %d of its %d instances were taken in", start, len(events)
            )
        done = start  # the instances taken in, from the first on: where a retry continues
        outcomes: list[str] = []
        failed: Exception | None = (
            None  # the first instance's failure that is no call to retry (see the module)
        )
        try:
            for event in events[start:]:
                self._time_for_another(events, time_left)
                try:
                    outcomes.append(accept(event))
                except TransientError:
                    raise  # (the others would meet it too: throttled, refused, out of time)
                except Exception as error:
                    if key is None:
                        raise
                    log.exception(
                        "instance %s of the event could not be taken in: the others are, then the event fails",
                        event.instance_id,
                    )
                    failed = failed or error
                    continue
                if failed is None:
                    done += 1
            if failed is not None:
                raise failed
        except Exception:
            if key is not None and done > start:
                self._progress.save_progress(key, done, self._clock.now())
                log.warning("took in %d of the event's %d instances; its retry continues", done, len(events))
            raise
        return outcomes

    def _time_for_another(self, events: Sequence[object], time_left: Callable[[], float]) -> None:
        left = time_left()
        if left < self._reserve:
            raise OutOfTime(
                f"{left:.1f} s are left: too little to start another of the event's {len(events)} instances; "
                "its retry continues"
            )
