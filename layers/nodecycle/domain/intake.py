"""Intake: turn one lifecycle event into a durable record and its first unit of work."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from enum import StrEnum

from nodecycle.domain.catalog import HookTimeouts, ManagedGroups
from nodecycle.domain.flow import plan_for, worker_of
from nodecycle.domain.model import LifecycleEvent, LifecycleRecord, global_deadline
from nodecycle.domain.policy import PlanPolicy
from nodecycle.domain.ports.lifecycle import RecordStore, WorkMessage, WorkQueues
from nodecycle.domain.ports.runtime import Clock, Metrics

log = logging.getLogger(__name__)


class IntakeOutcome(StrEnum):
    ACCEPTED = "accepted"  # a new record and its first message
    DUPLICATE = "duplicate"  # the action is known: nothing written, nothing sent
    RESENT = "resent"  # the action is known but its first message was lost: sent again
    UNMANAGED = "unmanaged"  # not a group (or hook) of this stack
    UNKNOWN_HOOK = "unknown-hook"  # the hook no longer exists, so neither does the action
    EXPIRED = "expired"  # delivered after the action's global timeout


class Intake:
    def __init__(
        self,
        *,
        owner: str,
        plan: PlanPolicy,
        records: RecordStore,
        queues: WorkQueues,
        groups: ManagedGroups,
        hooks: HookTimeouts,
        clock: Clock,
        metrics: Metrics,
        resume_grace: timedelta,
        retry_window: timedelta,
    ) -> None:
        self._owner = owner
        self._plan = plan
        self._retry_window = retry_window
        self._records = records
        self._queues = queues
        self._groups = groups
        self._hooks = hooks
        self._clock = clock
        self._metrics = metrics
        self._resume_grace = resume_grace

    def accept(self, event: LifecycleEvent) -> IntakeOutcome:
        if not self._groups.manages(event.group, event.hook):
            log.debug("ignored: group %s / hook %s is not managed by this stack", event.group, event.hook)
            self._metrics.count("LifecycleActionsIgnored")
            return IntakeOutcome.UNMANAGED

        self._metrics.count("LifecycleActionsReceived", transition=event.transition.short)
        timeout = self._hooks.heartbeat_timeout(event.group, event.hook)
        if timeout is None:
            log.warning("dropped: lifecycle hook %s of group %s does not exist", event.hook, event.group)
            self._metrics.count("LifecycleEventsRejected", reason="unknown-hook")
            return IntakeOutcome.UNKNOWN_HOOK

        window = int(self._retry_window.total_seconds())
        if timeout < window:
            log.warning(
                "hook %s has a heartbeat timeout of %d s, shorter than the heartbeat margin plus a crashed step's "
                "retry (%d s): a crash near a heartbeat deadline can let the action time out; raise it",
                event.hook,
                timeout,
                window,
            )
        now = self._clock.now()
        record = self._new_record(event, timeout, now)
        if now > record.global_deadline:
            log.warning("dropped: delivered after the action's global timeout (%s)", record.global_deadline)
            self._metrics.count("LifecycleEventsRejected", reason="expired")
            return IntakeOutcome.EXPIRED

        if self._records.create(record):
            self._send_first(record)
            log.info("accepted %s lifecycle action; first step %s", event.transition.short, record.step)
            return IntakeOutcome.ACCEPTED

        known = self._records.get(record.id)
        # A crash between the record's write and its first message leaves a record nobody works on: the
        # redelivery that follows the crash re-sends the message. Only when it is overdue, so that an
        # ordinary duplicate does not make a second unit of work.
        if known is not None and known.seq == 0 and known.overdue(now, self._resume_grace):
            self._send_first(known)
            log.warning("re-sent the first step of a known lifecycle action whose message was lost")
            return IntakeOutcome.RESENT
        log.info("duplicate delivery of a known lifecycle action: nothing to do")
        self._metrics.count("LifecycleEventsDuplicate")
        return IntakeOutcome.DUPLICATE

    def _new_record(self, event: LifecycleEvent, heartbeat_timeout: int, now: datetime) -> LifecycleRecord:
        plan = plan_for(event, self._plan)
        return LifecycleRecord(
            **event.model_dump(exclude={"delivery"}),  # the action, its timing and its warm-pool moves
            id=event.record_id,
            owner=self._owner,
            plan=plan,
            step=plan[0],
            received_at=now,
            updated_at=now,
            due_at=now,
            heartbeat_timeout=heartbeat_timeout,
            heartbeat_deadline=event.started_at + timedelta(seconds=heartbeat_timeout),
            global_deadline=global_deadline(event.started_at, heartbeat_timeout),
        )

    def _send_first(self, record: LifecycleRecord) -> None:
        message = WorkMessage(record_id=record.id, seq=record.seq, step=record.step)
        self._queues.send(worker_of(record), message)
