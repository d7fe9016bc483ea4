"""What every function shares: settings, clock, metrics, the record store, the work queues, Auto Scaling."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from nodecycle.adapters.autoscaling import AutoscalingActions
from nodecycle.adapters.clock import SystemClock
from nodecycle.adapters.dynamodb_records import DynamoRecordStore
from nodecycle.adapters.sqs_queues import SqsWorkQueues
from nodecycle.domain.engine import EngineTiming, StepEngine, StepHandler
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step, Transition
from nodecycle.observability import PowertoolsMetrics
from nodecycle.settings import ActionResult, EipFailurePolicy, Settings


@dataclass(frozen=True)
class Common:
    settings: Settings
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
        )

    def engine(self, worker: Worker, steps: Mapping[Step, StepHandler]) -> StepEngine:
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
            failure_result=self.failure_result,
        )

    def failure_result(self, record: LifecycleRecord) -> ActionResult:
        """The result for an action that must be settled before its work could finish."""
        if record.transition is Transition.TERMINATING:
            return ActionResult.CONTINUE  # the instance goes either way; CONTINUE runs the other hooks
        if record.step is Step.ASSIGN_EIP:
            return (
                ActionResult.ABANDON
                if self.settings.eip_failure_policy is EipFailurePolicy.ABANDON
                else ActionResult.CONTINUE
            )
        return self.settings.readiness_failure_result


@cache
def common() -> Common:
    """Built at the first invocation of a container (not at import), and kept for the next ones."""
    settings = Settings.from_env(os.environ)
    return Common(
        settings=settings,
        clock=SystemClock(),
        metrics=PowertoolsMetrics(settings.owner_id),
        records=DynamoRecordStore(settings.record_table, ttl=timedelta(days=settings.record_ttl_days)),
        queues=SqsWorkQueues({Worker.DRAIN: settings.drain_queue_url, Worker.EIP: settings.eip_queue_url}),
        autoscaling=AutoscalingActions(),
    )
