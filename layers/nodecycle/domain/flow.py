"""The order of the steps of a lifecycle, and which function runs each: the one place that says so.

A plan is chosen once, when the action is received, and stored in its record, so a stack update that
changes the settings never reshapes a lifecycle half-way through.
"""

from __future__ import annotations

from enum import StrEnum

from nodecycle.domain.model import LifecycleEvent, LifecycleRecord, Step, Transition
from nodecycle.settings import EipMode, Settings


class Worker(StrEnum):
    """A function with its own work queue."""

    DRAIN = "drain"  # everything that talks to Kubernetes, and completion
    EIP = "eip"  # Elastic IP work; never imports the Kubernetes client


_WORKER = {Step.ASSIGN_EIP: Worker.EIP, Step.RELEASE_EIP: Worker.EIP}


def worker_of(step: Step) -> Worker:
    return _WORKER.get(step, Worker.DRAIN)


def plan_for(event: LifecycleEvent, settings: Settings) -> tuple[Step, ...]:
    eip = settings.eip_mode is not EipMode.OFF
    kube = settings.uses_kubernetes
    steps: list[Step] = []
    if event.transition is Transition.LAUNCHING:
        # An instance launched into a warm pool is stopped right after: it neither joins the cluster nor
        # needs its public address until it leaves the pool (a launch action of its own).
        if not event.into_warm_pool:
            if eip:
                steps.append(Step.ASSIGN_EIP)
            if settings.readiness_gate_enabled:
                steps.append(Step.READY_GATE)
        steps.append(Step.COMPLETE)
    else:
        # An instance that terminates from a warm pool is stopped: no node to drain, no budget to take.
        if kube and not event.from_warm_pool:
            steps += [Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT]
        if eip:
            steps.append(Step.RELEASE_EIP)
        steps.append(Step.COMPLETE)
        if kube and not event.from_warm_pool:
            steps.append(Step.CLEANUP)
    steps.append(Step.DONE)
    return tuple(steps)


def following(record: LifecycleRecord, step: Step) -> Step:
    """The step after ``step`` in the record's plan."""
    return record.plan[record.plan.index(step) + 1]


def after_completion(record: LifecycleRecord) -> Step:
    """Where a lifecycle goes once its action is settled (completed, or gone without us)."""
    return following(record, Step.COMPLETE)
