"""The step engine of a worker function (eip, drain) and its timing (the sweeper's too), over the shared ports.

Apart from ``wiring.common``, which the intake function imports as well: intake only sends each new
lifecycle's first message (``Common.dispatcher``), and its cold start would otherwise import the engine and
what its steps need (``python -m benchmarks --only cold``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from nodecycle.domain.completion import SettleResults
from nodecycle.domain.engine import ClaimingStep, EngineTiming, Outcome, StepEngine, StepHandler
from nodecycle.domain.flow import Worker
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.wiring.common import Common, InvocationTime, invocation_time


class _WithinStepTime:
    """A step whose AWS calls end within its time (see InvocationTime.step)."""

    def __init__(self, handler: StepHandler, time: InvocationTime) -> None:
        self._handler = handler
        self._time = time

    def __call__(self, record: LifecycleRecord, now: datetime, *, last: bool = False) -> Outcome:
        with self._time.step():
            if isinstance(self._handler, ClaimingStep):  # (``last``: see engine.ClaimingStep)
                return self._handler(record, now, last=last)
            return self._handler(record, now)

    def before_claim(self, record: LifecycleRecord, now: datetime) -> LifecycleRecord:
        """(engine.ClaimingStep) within the step's time too, as the step's own calls: a hung Auto Scaling must
        leave the engine its reserve."""
        if not isinstance(self._handler, ClaimingStep):
            return record
        with self._time.step():
            return self._handler.before_claim(record, now)


def within_step_time(steps: Mapping[Step, StepHandler], time: InvocationTime) -> dict[Step, StepHandler]:
    return {step: _WithinStepTime(handler, time) for step, handler in steps.items()}


def engine_timing(ports: Common) -> EngineTiming:
    settings = ports.settings
    return EngineTiming(
        resume_grace=ports.resume_grace,
        redelivery=timedelta(seconds=settings.redelivery_seconds),
        heartbeat_margin=timedelta(seconds=settings.heartbeat_margin_seconds),
        settle_before=timedelta(seconds=settings.settle_before_seconds),
    )


def worker_engine(
    ports: Common,
    worker: Worker,
    steps: dict[Step, StepHandler],
    settle: SettleResults,
    out_of_line: Callable[[LifecycleRecord, datetime], None] | None = None,
) -> StepEngine:
    """The step engine of one worker function, over the shared ports: the AWS calls of its steps end within
    the step's time of the invocation that runs them (InvocationTime), as do the engine's confirmation before
    a step, the engine's own within the invocation's."""
    return StepEngine(
        worker=worker,
        steps=within_step_time(steps, invocation_time()),
        step_time=invocation_time().step,
        records=ports.records,
        queues=ports.queues,
        autoscaling=ports.autoscaling,
        clock=ports.clock,
        metrics=ports.metrics,
        timing=engine_timing(ports),
        failure_result=settle,
        out_of_line=out_of_line,
    )
