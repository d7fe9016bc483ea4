"""A launch whose call right after its AllocateAddress goes unanswered (``RequestLimitExceeded`` past botocore's
retries: an account whose other tools share EC2's request rate), on moto through the eip function and the EC2
adapter, EC2 not listing a new address for its next calls (eventually consistent).

Only the step's scratch remembered the allocation, and a step that raises commits nothing: the engine's retry, a
second or two later, did not find the address (not listed yet) and allocated another. The instance ended with one of
them, the other unassociated until the sweeper's grace (counted EipsAllocated twice), and a pool that grows when
empty grew by two addresses, for good (a pool's address is never released). The call is now asked again at the
step's next run, the allocation kept."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import OWNER_TAG
from tests.functions.eip.conftest import AwsLikeEc2, addresses, aws_error, given, now, run_instances
from tests.functions.eip.test_ec2_consistency import run_past
from tests.support.emf import metric
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
OPERATIONS = {"associate_address": "AssociateAddress", "describe_addresses": "DescribeAddresses"}


@pytest.mark.parametrize(
    ("mode", "call"),
    [("allocate", "associate_address"), ("allocate", "describe_addresses"), ("pool", "associate_address")],
)
def test_a_call_unanswered_right_after_an_allocation_allocates_no_second_address(
    eip_fn: ModuleType,
    stack: Stack,
    ec2: AwsLikeEc2,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: str,
    call: str,
) -> None:
    # Given EC2 that does not know a new address for the next three calls naming or listing it, and that throttles
    # the launch's next call after its allocation (its association, or its listing of the instance's addresses),
    # in allocate mode or with an empty pool that grows when empty
    if mode == "pool":
        monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
        monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
        monkeypatch.setenv("NODECYCLE_EIP_POOL_ALLOCATE_WHEN_EMPTY", "true")
    ec2.lag = 3
    allocate_as_ec2_does = ec2.allocate_address

    def then_throttled(**kwargs: Any) -> Any:
        allocated = allocate_as_ec2_does(**kwargs)
        ec2.failures[call] = [aws_error("RequestLimitExceeded", OPERATIONS[call], "Request limit exceeded.")]
        monkeypatch.setattr(ec2, "allocate_address", allocate_as_ec2_does)
        return allocated

    monkeypatch.setattr(ec2, "allocate_address", then_throttled)
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))

    # When the launch runs until it goes on
    done = run_past(eip_fn, stack, record, Step.ASSIGN_EIP)

    # Then the instance holds the one address allocated for it: none allocated again for one the throttled run
    # forgot (in pool mode, none grown into the pool for good)
    assert done.step is Step.READY_GATE
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert (address.get("InstanceId"), done.allocation_id) == (instance, address["AllocationId"])
    assert metric(capsys.readouterr().out, "EipsAllocated") == 1
