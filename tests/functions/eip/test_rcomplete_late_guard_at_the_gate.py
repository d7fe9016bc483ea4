"""The eip function's late guard on a launch whose address step ends past the guard's point (``settle_before`` before
the global timeout), with the readiness gate next in its plan.

The engine judges the guard again when a step ends (``StepEngine._run_step``'s late guard): a step that took its time
(EC2 slow to answer AssociateAddress, botocore retrying it; or a launch waiting in a pool's line, its wait capped at
the guard's point, run up to a second early and handed an address just then) may end past the point where the action
must be completed whatever it waits for. The launch has moved on to its readiness gate by then, and the guard's result
for a launch waiting there is the readiness policy's (``ReadinessFailureResult``), which the drain function and the
sweeper are wired with. The eip function was not: its failure result knew the address policy alone and raised for any
other step, after the address was associated and before the commit. The message failed (an error in the function's
log and metrics), its redelivery came a visibility timeout later (150 s of the 420 s the guard keeps for one fault),
and its guard, at the step the commit never left, completed a launch that had its address with the address policy's
result. On moto, through the eip function as wired (nodecycle.wiring.eip)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

from nodecycle.adapters import clock as clocks
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from tests.functions.eip.conftest import AwsLikeEc2, current, given, now, run_instances, work_event
from tests.support.functions import LambdaContext
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

# The template's defaults: the guard completes an action this long before its global timeout
# (settings.Timing.settle_before_seconds: a 5-minute sweep interval and two 60 s margins)
SETTLE_BEFORE = timedelta(seconds=420)
# How long EC2 took to answer the association (its retries under throttling)
SLOW_ASSOCIATION = timedelta(seconds=60)


@pytest.mark.parametrize("readiness", [ActionResult.CONTINUE, ActionResult.ABANDON])
def test_a_launch_whose_address_step_ends_past_the_guards_point_is_completed_with_the_readiness_result(
    eip_fn: ModuleType,
    stack: Stack,
    ec2: AwsLikeEc2,
    monkeypatch: pytest.MonkeyPatch,
    readiness: ActionResult,
) -> None:
    # Given the eip function with an address policy that abandons, and a readiness policy of its own
    monkeypatch.setenv("NODECYCLE_EIP_FAILURE_POLICY", "abandon")
    monkeypatch.setenv("NODECYCLE_READINESS_FAILURE_RESULT", readiness.value)
    # And a clock that moves on as EC2 takes its time to answer AssociateAddress
    ahead = [timedelta(0)]
    monkeypatch.setattr(clocks.SystemClock, "now", lambda self: datetime.now(UTC) + ahead[0])
    associate = ec2.associate_address

    def slow_association(**kwargs: Any) -> Any:
        ahead[0] += SLOW_ASSOCIATION
        return associate(**kwargs)

    monkeypatch.setattr(ec2, "associate_address", slow_association)
    # And a launch at its address step, its gate next, due half a minute before the guard's point (no heartbeat due
    # before its global timeout: the guard alone decides)
    (instance,) = run_instances(1)
    deadline = now() + SETTLE_BEFORE + timedelta(seconds=30)
    record = given(
        stack,
        launch_record(instance, at=now(), global_deadline=deadline, heartbeat_deadline=deadline),
    )
    assert record.plan == (Step.ASSIGN_EIP, Step.READY_GATE, Step.COMPLETE, Step.DONE)

    # When its message runs, and the association ends past the guard's point
    response = eip_fn.handler(work_event(record), LambdaContext())

    # Then the step's run commits: its message does not fail
    assert response.get("batchItemFailures", []) == []
    # And the launch, its address assigned, is completed by the guard with the readiness policy's result, the one its
    # step now waits under (not the address policy's: the address was assigned)
    settled = current(stack, record)
    assert settled.allocation_id is not None
    assert settled.outcome == "global-timeout-near"
    assert settled.result is readiness
    assert settled.step in (Step.DONE, Step.COMPLETE)
    assert settled.completed_at is not None
