"""The flow: which steps a lifecycle's plan holds, and which function runs each of them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nodecycle.domain.flow import Worker, completed_first, plan_for, worker_for
from nodecycle.domain.model import LifecycleEvent, Step, Transition
from nodecycle.domain.policy import PlanPolicy
from tests.unit.foundation.test_engine import make_record

KUBE_AND_EIP = PlanPolicy(kubernetes=True, eip=True, readiness_gate=True)


def event(
    transition: Transition, origin: str | None = None, destination: str | None = None
) -> LifecycleEvent:
    return LifecycleEvent(
        instance_id="i-0123456789abcdef0",
        transition=transition,
        token="7b4c5d2e-1f3a-4b6c-8d9e-0a1b2c3d4e5f",
        group="nodes",
        hook="hook",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        origin=origin,
        destination=destination,
        delivery="eventbridge",
    )


@pytest.mark.parametrize(
    ("policy", "transition", "plan"),
    [
        (KUBE_AND_EIP, Transition.LAUNCHING, ("assign-eip", "ready-gate", "complete", "done")),
        (
            KUBE_AND_EIP,
            Transition.TERMINATING,
            ("acquire-slot", "cordon", "evict", "release-eip", "complete", "cleanup", "done"),
        ),
        (PlanPolicy(False, True, True), Transition.LAUNCHING, ("assign-eip", "complete", "done")),
        (PlanPolicy(False, True, True), Transition.TERMINATING, ("release-eip", "complete", "done")),
        (PlanPolicy(True, False, False), Transition.LAUNCHING, ("complete", "done")),
    ],
)
def test_the_plan_holds_only_what_the_stack_does(
    policy: PlanPolicy, transition: Transition, plan: tuple[str, ...]
) -> None:
    assert plan_for(event(transition), policy) == tuple(Step(step) for step in plan)


def test_warm_pool_moves_have_nothing_to_drain_or_assign() -> None:
    assert plan_for(event(Transition.LAUNCHING, destination="WarmPool"), KUBE_AND_EIP) == (
        Step.COMPLETE,
        Step.DONE,
    )
    assert plan_for(event(Transition.TERMINATING, origin="WarmPool"), KUBE_AND_EIP) == (
        Step.RELEASE_EIP,
        Step.COMPLETE,
        Step.DONE,
    )


def test_a_root_volume_replacement_drains_the_node_but_keeps_the_address_its_instance_keeps() -> None:
    # (its terminate hook's action: out of the group and back into it; the instance keeps its network interfaces)
    replacing = event(Transition.TERMINATING, origin="AutoScalingGroup", destination="AutoScalingGroup")
    assert plan_for(replacing, KUBE_AND_EIP) == (
        Step.ACQUIRE_SLOT,
        Step.CORDON,
        Step.EVICT,
        Step.COMPLETE,
        Step.CLEANUP,
        Step.DONE,
    )
    assert plan_for(replacing, PlanPolicy(False, True, True)) == (Step.COMPLETE, Step.DONE)


def test_completion_runs_on_the_worker_that_has_the_record() -> None:
    launch = plan_for(
        event(Transition.LAUNCHING), PlanPolicy(kubernetes=True, eip=True, readiness_gate=False)
    )
    # An address and no gate: the eip function assigns and completes; the drain function is never involved
    assert [worker_for(launch, step) for step in launch[:-1]] == [Worker.EIP, Worker.EIP]
    # Sent by a worker, the completion stays on that worker (a jump to COMPLETE from any step)
    assert worker_for(launch, Step.COMPLETE, here=Worker.DRAIN) is Worker.DRAIN
    terminate = plan_for(event(Transition.TERMINATING), KUBE_AND_EIP)
    assert worker_for(terminate, Step.COMPLETE) is Worker.EIP  # after RELEASE_EIP
    assert worker_for(terminate, Step.CLEANUP) is Worker.DRAIN
    # A plan that starts with its completion goes to the function without the Kubernetes client
    assert worker_for((Step.COMPLETE, Step.DONE), Step.COMPLETE) is Worker.EIP


RELEASED_AFTER = ("acquire-slot", "cordon", "evict", "complete", "release-eip", "cleanup", "done")
AS_PLANNED = ("acquire-slot", "cordon", "evict", "release-eip", "complete", "cleanup", "done")


@pytest.mark.parametrize(
    ("step", "plan"),
    [
        # a drain, or a release still retrying: the release goes after the completion
        (Step.ACQUIRE_SLOT, RELEASED_AFTER),
        (Step.EVICT, RELEASED_AFTER),
        (Step.RELEASE_EIP, RELEASED_AFTER),
        (Step.COMPLETE, AS_PLANNED),  # released already
    ],
)
def test_an_action_completed_first_has_the_release_it_has_not_run_yet_right_after_its_completion(
    step: Step, plan: tuple[str, ...]
) -> None:
    terminate = plan_for(event(Transition.TERMINATING), KUBE_AND_EIP)
    assert completed_first(make_record(terminate, step)) == tuple(Step(name) for name in plan)


def test_a_plan_without_a_release_is_completed_first_as_it_is() -> None:
    no_eip = PlanPolicy(kubernetes=True, eip=False, readiness_gate=False)
    terminate = plan_for(event(Transition.TERMINATING), no_eip)
    assert completed_first(make_record(terminate, Step.EVICT)) == terminate
