"""The eip function on moto: a launch whose instance is terminated while its address is being associated (a
scale-in right after the scale-out, a Spot instance reclaimed) ends as ``instance-gone``: no EIP failure counted
(the EipFailures alarm pages for live instances left without their address), the address it allocated released,
a pool's left free in the pool, nothing completed.

EC2 refuses AssociateAddress for a terminated (or shutting-down) instance; moto associates it, so the function's
EC2 client is conftest.py's AwsLikeEc2, which refuses it as EC2 does (``InvalidInstanceID``, as the sandbox's EC2
answers it too: nodecycle_sandbox/aws/ec2_addresses.py)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import (
    AwsLikeEc2,
    addresses,
    allocate,
    current,
    given,
    now,
    run_instances,
    work_event,
)
from tests.support.emf import metric
from tests.support.functions import LambdaContext
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
POOL = "ci"


def terminated_at_association(ec2: AwsLikeEc2, instance: str) -> None:
    """The instance is terminated right as the step associates its address: EC2 refuses the association."""
    associate = ec2.associate_address

    def terminate_then_associate(**kwargs: Any) -> Any:
        boto3.client("ec2").terminate_instances(InstanceIds=[instance])
        return associate(**kwargs)

    ec2.associate_address = terminate_then_associate  # type: ignore[method-assign]


@pytest.mark.parametrize("mode", ["allocate", "pool"])
def test_a_launch_whose_instance_is_terminated_at_the_association_ends_as_gone_without_a_failure(
    eip_fn: ModuleType,
    stack: Stack,
    ec2: AwsLikeEc2,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    # Given a launch at ASSIGN_EIP (in pool mode, a pool of one free address), whose instance the group
    # terminates right as the step associates an address with it
    monkeypatch.setenv("NODECYCLE_EIP_MODE", mode)
    pooled = None
    if mode == "pool":
        monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", POOL)
        pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL})
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))
    terminated_at_association(ec2, instance)

    # When the eip function runs the step
    response = eip_fn.handler(work_event(record), LambdaContext())

    # Then EC2 refused the association, and the launch ends past its completion as gone: nothing completed
    assert response.get("batchItemFailures", []) == []
    assert ec2.refusals["InvalidInstanceID"] == 1
    ended = current(stack, record)
    assert (ended.step, ended.outcome, ended.result) == (Step.DONE, "instance-gone", None)
    # And no EIP failure is counted (no page), nor an unknown or expired action
    output = capsys.readouterr().out
    assert metric(output, "EipFailures") == 0
    assert metric(output, "LifecycleActionsUnknown") == metric(output, "LifecycleActionsExpired") == 0
    # And nothing leaks: the address allocated for it is released; a pool's stays in the pool, free
    left = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert [(a["AllocationId"], a.get("AssociationId")) for a in left] == (
        [] if pooled is None else [(pooled, None)]
    )
