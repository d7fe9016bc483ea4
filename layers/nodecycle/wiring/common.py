"""What every function shares: the clock, metrics, the record store, the work queues, Auto Scaling, and the
narrow policies the domain is handed, built from the function's own settings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from nodecycle.adapters.aws.autoscaling import AutoscalingActions
from nodecycle.adapters.aws.queues import SqsWorkQueues
from nodecycle.adapters.aws.records import DynamoRecordStore
from nodecycle.adapters.clock import SystemClock
from nodecycle.domain.completion import SettleResults
from nodecycle.domain.engine import Dispatcher, EngineTiming, StepEngine, StepHandler
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import Step
from nodecycle.domain.policy import DrainPolicy, EipPolicy, ReadinessPolicy
from nodecycle.observability import PowertoolsMetrics
from nodecycle.settings import DrainSettings, Eip, FunctionSettings


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

    @property
    def timing(self) -> EngineTiming:
        return EngineTiming(
            resume_grace=self.resume_grace,
            redelivery=timedelta(seconds=self.settings.redelivery_seconds),
            heartbeat_margin=timedelta(seconds=self.settings.heartbeat_margin_seconds),
            settle_before=timedelta(seconds=self.settings.settle_before_seconds),
        )

    def dispatcher(self) -> Dispatcher:
        return Dispatcher(records=self.records, queues=self.queues, clock=self.clock, metrics=self.metrics)

    def engine(self, worker: Worker, steps: dict[Step, StepHandler], settle: SettleResults) -> StepEngine:
        """The step engine of one worker function, over the shared ports."""
        return StepEngine(
            worker=worker,
            steps=steps,
            records=self.records,
            queues=self.queues,
            autoscaling=self.autoscaling,
            clock=self.clock,
            metrics=self.metrics,
            timing=self.timing,
            failure_result=settle,
        )


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
