"""The order of the steps of a lifecycle, and which function runs each: the one place that says so.

A plan is chosen once, when the action is received, and stored in its record, so a stack update that
changes the settings never reshapes a lifecycle half-way through.
"""

from __future__ import annotations

from enum import StrEnum

from nodecycle.domain.model import DisruptionEvent, LifecycleEvent, LifecycleRecord, Step, Transition
from nodecycle.domain.policy import PlanPolicy, RebalancePolicy


class Worker(StrEnum):
    """A function with its own work queue."""

    DRAIN = "drain"  # everything that talks to Kubernetes
    EIP = "eip"  # Elastic IP work; never imports the Kubernetes client
    # The drain function's priority lane: budget wake-ups only, on a queue and a function of their own, which
    # run the drain function's steps. SQS has no priority within a queue: on the drain queue a wake-up would
    # wait behind every poll of a large refresh, and the freed slot idle meanwhile. What a woken lifecycle
    # sends next goes back to the drain queue (the lane's engine is the drain worker's).
    WAKE = "wake"


_WORKER = {Step.ASSIGN_EIP: Worker.EIP, Step.RELEASE_EIP: Worker.EIP}
# Completing an action needs only Auto Scaling, which every worker can reach: it runs where the record is
# (the worker that ran the step before), so a launch with an address and no readiness gate never wakes the
# drain function, nor loads the Kubernetes client, just to complete.
_WHERE_THE_RECORD_IS = frozenset({Step.COMPLETE, Step.DONE})


# The steps that disrupt something (take a slot others wait for, cordon, evict, release an address, or give
# a running instance one: its public IP changes under its connections): before the first of them the engine
# confirms with Auto Scaling that the action is real and active. And the launch readiness gate, which disrupts
# nothing but keeps its record open up to its timeout: a forged launch's record would stand for the instance's
# action meanwhile, and the sweeper would neither keep alive nor adopt the true one whose event was lost (one
# heartbeat per launch that has no address step to confirm it).
_CONFIRMED_FIRST = frozenset(
    {
        Step.ACQUIRE_SLOT,
        Step.CORDON,
        Step.EVICT,
        Step.ASSIGN_EIP,
        Step.RELEASE_EIP,
        Step.FORGET_NODE,
        Step.READY_GATE,
    }
)
# The steps of a drain in progress: a cordoned node holding a budget slot, its drain timeout running.
_DRAINING = frozenset({Step.CORDON, Step.EVICT})


def needs_confirmation(step: Step) -> bool:
    return step in _CONFIRMED_FIRST


def draining(step: Step) -> bool:
    return step in _DRAINING


def worker_of(record: LifecycleRecord, here: Worker | None = None) -> Worker:
    """The function that runs the record's current step, sent from worker ``here`` (None: from intake or
    the sweeper)."""
    return worker_for(record.plan, record.step, here)


def worker_for(plan: tuple[Step, ...], step: Step, here: Worker | None = None) -> Worker:
    if step not in _WHERE_THE_RECORD_IS:
        return _WORKER.get(step, Worker.DRAIN)
    if here is not None:
        return here
    # Not sent by a worker: the worker of the step before it in the plan, or the one without Kubernetes.
    before = plan[: plan.index(step)] if step in plan else ()
    return worker_for(plan, before[-1]) if before else Worker.EIP


def plan_for(event: LifecycleEvent, policy: PlanPolicy) -> tuple[Step, ...]:
    eip = policy.eip
    kube = policy.kubernetes
    steps: list[Step] = []
    if event.transition is Transition.LAUNCHING:
        # An instance launched into a warm pool is stopped right after: it neither joins the cluster nor
        # needs its public address until it leaves the pool (a launch action of its own).
        if not event.into_warm_pool:
            if eip:
                steps.append(Step.ASSIGN_EIP)
            if policy.readiness_gate and kube:
                steps.append(Step.READY_GATE)
        steps.append(Step.COMPLETE)
    else:
        # An instance that terminates from a warm pool is stopped: no node to drain, no budget to take.
        if kube and not event.from_warm_pool:
            steps += [Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT]
        # A root volume replacement keeps the instance, its network interfaces and their addresses: released, the
        # address went from an instance back in service minutes later, which its launch then gave another.
        if eip and not event.replaces_root_volume:
            steps.append(Step.RELEASE_EIP)
        steps.append(Step.COMPLETE)
        if kube and not event.from_warm_pool:
            steps.append(Step.CLEANUP)
    steps.append(Step.DONE)
    return tuple(steps)


def disruption_plan(event: DisruptionEvent, policy: PlanPolicy) -> tuple[Step, ...]:
    """The plan of a disruption without a hook; empty when this stack has nothing to do for it. No
    completion: no hook waits for one. A later terminate hook of the same instance finds the node drained."""
    kube, eip = policy.kubernetes, policy.eip
    steps: list[Step] = []
    if event.cause is Transition.STATE_CHANGE:  # it already happened: free what the instance held, at once
        steps += [Step.FORGET_NODE] if kube else []
        steps += [Step.RELEASE_EIP] if eip else []
    elif event.cause is Transition.REBALANCE:
        if kube and policy.rebalance is RebalancePolicy.CORDON:
            steps += [Step.CORDON, Step.CLEANUP]
        elif kube and policy.rebalance is RebalancePolicy.DRAIN:
            steps += [Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.CLEANUP]
    elif kube:  # a Spot interruption, scheduled maintenance: drained before it strikes
        steps += [Step.ACQUIRE_SLOT, Step.CORDON, Step.EVICT, Step.CLEANUP]
    return (*steps, Step.DONE) if steps else ()


def following(record: LifecycleRecord, step: Step) -> Step:
    """The step after ``step`` in the record's plan."""
    return record.plan[record.plan.index(step) + 1]


def settle_step(record: LifecycleRecord) -> Step:
    """Where a lifecycle goes when its drain ends early (no node, another owner's node), or is over already:
    what its plan does after a drain. Its address taken back first: the instance still holds it (one going to
    its warm pool would keep it there, out of the sweeper's reach); then its completion. A disruption without
    a hook has none, and goes to its cleanup."""
    # (every caller is a drain step of the plan; a step outside it, should one call this, looks at the whole)
    later = record.plan[record.plan.index(record.step) + 1 :] if record.step in record.plan else record.plan
    for step in (Step.RELEASE_EIP, Step.COMPLETE, Step.CLEANUP):
        if step in later:
            return step
    return Step.DONE


def completed_first(record: LifecycleRecord) -> tuple[Step, ...]:
    """The record's plan for an action completed before its global timeout, whatever its current step waits
    for (the engine's guard, the sweeper's settlement): the completion comes before a release of the address
    that has not run yet. A release first would not fit in the time the guard keeps (only the completion's
    margin and one fault's retry), and skipped it would leave the address with the instance: one going back
    to its warm pool keeps it there, out of the sweeper's reach. Right after the completion the instance is
    terminating or going to its pool."""
    plan = record.plan
    if Step.RELEASE_EIP not in plan or Step.COMPLETE not in plan or record.step not in plan:
        return plan
    if plan.index(record.step) > plan.index(Step.RELEASE_EIP):
        return plan  # released already (or at its completion)
    rest = [step for step in plan if step is not Step.RELEASE_EIP]
    at = rest.index(Step.COMPLETE) + 1
    return (*rest[:at], Step.RELEASE_EIP, *rest[at:])


def after_completion(record: LifecycleRecord) -> Step:
    """Where a lifecycle goes once its action is settled (completed, or gone without us)."""
    return following(record, Step.COMPLETE)
