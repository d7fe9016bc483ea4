"""What every function shares: the clock, metrics, the record store, the work queues, Auto Scaling, and the
narrow policies the domain is handed, built from the function's own settings."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.clients import calls_within
from nodecycle.adapters.aws.queues import SqsWorkQueues
from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.dispatch import Dispatcher
from nodecycle.domain.flow import Worker
from nodecycle.domain.policy import DrainPolicy, EipPolicy, ReadinessPolicy
from nodecycle.observability import PowertoolsMetrics
from nodecycle.settings import Eip, FunctionSettings

if TYPE_CHECKING:  # (imported by the drain function alone: nodecycle.settings, _CLUSTER_SETTINGS)
    from nodecycle.settings import DrainSettings

# What an invocation keeps of the function's time after a step's calls: the engine's commit of the step, a
# heartbeat, the next message (one AWS call each, well under a second unless throttled). Under the engine's
# inline budget (15 s: a step runs inline only with that much left), so an inline step still has seconds for its
# calls; a slower pass ends where its time does, and goes on at its next poll.
STEP_RESERVE_SECONDS = 10.0
# What an invocation keeps after its last AWS call: the handler's return and the flush of its metrics and logs,
# which the runtime does not wait for past the timeout
END_RESERVE_SECONDS = 2.0
# An invocation that reads less than this left after the reserve at its start reads a clock that is off (see
# InvocationTime.running): a fresh one has the function's whole timeout (60 s)
MIN_RUN_SECONDS = 5.0


class InvocationTime:
    """What is left of the current invocation's time, in seconds (None outside an invocation): for a step's calls
    (:meth:`left`), the function's remaining time when the invocation began less ``STEP_RESERVE_SECONDS``; for
    the calls after the step, the engine's (:meth:`left_to_end`), all of it less ``END_RESERVE_SECONDS``. A plain
    deadline on the monotonic clock: neither the domain nor the adapters see the Lambda context."""

    def __init__(
        self, reserve: float = STEP_RESERVE_SECONDS, end_reserve: float = END_RESERVE_SECONDS
    ) -> None:
        self._reserve = reserve
        self._end_reserve = end_reserve
        self._ends: ContextVar[tuple[float, float] | None] = ContextVar("invocation_ends", default=None)

    @contextmanager
    def running(self, remaining_seconds: float) -> Iterator[None]:
        """An invocation with ``remaining_seconds`` of the function's time left: the Kubernetes calls of its steps
        end within :meth:`left` (the cluster's client asks it: eks_access.call_timeout), and every AWS call made
        in it within :meth:`left_to_end` (clients.calls_within), a step's within :meth:`left` (see
        :meth:`step`). The runtime counts ``remaining_seconds`` on the container's wall clock (its deadline less
        the time now): a clock far off (set ahead) reads nothing left at an invocation's start, a minute early.
        Then the calls keep their own timeouts, as before there was a deadline, rather than none of them being
        made."""
        usable = remaining_seconds - self._reserve
        now = time.monotonic()
        ends = (
            (now + usable, now + remaining_seconds - self._end_reserve) if usable >= MIN_RUN_SECONDS else None
        )
        token = self._ends.set(ends)
        try:
            with calls_within(self.left_to_end):
                yield
        finally:
            self._ends.reset(token)

    @contextmanager
    def step(self) -> Iterator[None]:
        """A step's AWS calls end where its Kubernetes calls do, leaving the reserve to the engine's commit after
        it: a step cut short is retried (a TransientError), where one whose calls took the reserve leaves the
        commit too little time, and its message comes back only after the queue's visibility timeout."""
        with calls_within(self.left):
            yield

    def left(self) -> float | None:
        ends = self._ends.get()
        return None if ends is None else ends[0] - time.monotonic()

    def left_to_end(self) -> float | None:
        ends = self._ends.get()
        return None if ends is None else ends[1] - time.monotonic()


@cache
def invocation_time() -> InvocationTime:
    """The time of the invocation running now in this container (one at a time: Lambda's model)."""
    return InvocationTime()


@dataclass(frozen=True)
class Common:
    settings: FunctionSettings
    clock: SystemClock
    metrics: PowertoolsMetrics
    records: DynamoRecordStore
    queues: SqsWorkQueues
    autoscaling: AutoscalingActions

    @property
    def resume_grace(self) -> timedelta:
        return timedelta(seconds=self.settings.resume_grace_seconds)

    def dispatcher(self) -> Dispatcher:
        return Dispatcher(records=self.records, queues=self.queues, clock=self.clock, metrics=self.metrics)


@cache
def common(settings: FunctionSettings) -> Common:
    """Built at the first invocation of a container (not at import), and kept for the next ones."""
    return Common(
        settings=settings,
        clock=SystemClock(),
        metrics=PowertoolsMetrics(settings.owner_id),
        records=DynamoRecordStore(settings.record_table, ttl=timedelta(days=settings.record_ttl_days)),
        queues=SqsWorkQueues(
            {
                Worker.DRAIN: settings.drain_queue_url,
                Worker.EIP: settings.eip_queue_url,
                Worker.WAKE: settings.wake_queue_url,
            }
        ),
        autoscaling=AutoscalingActions(),
    )


# -- the narrow policies, each from its own section of the settings -----------------------------------


def drain_policy(settings: DrainSettings) -> DrainPolicy:
    return DrainPolicy(
        timeout=timedelta(seconds=settings.drain_timeout_seconds),
        pod_grace_cap=settings.pod_grace_cap_seconds,
        on_timeout=settings.timeout_policy,
        force_grace=settings.force_grace_seconds,
        exclude_from_load_balancers=settings.exclude_from_load_balancers,
        lb_deregistration_delay=timedelta(seconds=settings.lb_deregistration_delay_seconds),
        poll_seconds=settings.drain_poll_seconds,
        budget_retry_seconds=settings.budget_retry_seconds,
        holder_ttl=timedelta(seconds=settings.budget_holder_ttl_seconds),
        settle_margin=timedelta(seconds=settings.settle_before_seconds),  # where the engine's guard completes
        maintenance_lead=timedelta(minutes=settings.maintenance_lead_minutes),
    )


def readiness_policy(settings: DrainSettings, poll_seconds: int) -> ReadinessPolicy:
    return ReadinessPolicy(
        timeout=timedelta(seconds=settings.readiness_timeout_seconds),
        poll_seconds=poll_seconds,
        on_failure=settings.readiness_failure_result,
        settle_margin=timedelta(seconds=settings.settle_before_seconds),  # where the engine's guard completes
    )


def eip_policy(settings: Eip) -> EipPolicy:
    return EipPolicy(
        mode=settings.eip_mode,
        pool=settings.eip_pool_name,
        grow_pool=settings.eip_pool_allocate_when_empty,
        on_failure=settings.eip_failure_policy,
        wait=timedelta(seconds=settings.eip_wait_seconds),
    )
