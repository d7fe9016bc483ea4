"""The eip function on moto against what EC2 does that moto does not: it is eventually consistent (a new address
or instance unknown for a while, right after its creation), and it throttles any call.

The function's EC2 client is the AwsLikeEc2 of conftest.py; a throttle is botocore's answer to one call
(``RequestLimitExceeded`` past the client's own retries), given where the adapter sends it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import AwsLikeEc2, addresses, run_instances, store, work_event
from tests.support.emf import metric
from tests.support.functions import LambdaContext
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack


def now() -> datetime:
    return datetime.now(UTC)


def given(stack: Stack, record: LifecycleRecord) -> LifecycleRecord:
    assert store(stack).create(record)
    return record


def due_now(stack: Stack, record: LifecycleRecord) -> LifecycleRecord:
    """The record as its next run comes due (the test does not wait for the step's delay)."""
    stored = store(stack).get(record.id)
    assert stored is not None
    if stored.finished:
        return stored
    due = stored.model_copy(update={"due_at": now()})
    assert store(stack).commit(due, expected_seq=stored.seq)
    return due


def run_past(eip_fn: ModuleType, stack: Stack, record: LifecycleRecord, *steps: Step) -> LifecycleRecord:
    """Deliver the record's messages to the eip function, each as soon as it is due, until it is past ``steps``."""
    for _ in range(12):
        due = due_now(stack, record)
        if due.step not in steps:
            return due
        response = eip_fn.handler(work_event(due), LambdaContext())
        assert response.get("batchItemFailures", []) == []
    raise AssertionError(f"still at {due.step} after 12 runs")


@pytest.mark.parametrize("mode", ["allocate", "pool"])
def test_an_address_ec2_does_not_know_yet_right_after_its_allocation_is_the_one_associated(
    eip_fn: ModuleType,
    stack: Stack,
    ec2: AwsLikeEc2,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    mode: str,
) -> None:
    # Given EC2 that does not know a new address for the next three calls naming or listing it (eventual
    # consistency: InvalidAllocationID.NotFound, left out of DescribeAddresses), in allocate mode or with an
    # empty pool that grows when empty
    if mode == "pool":
        monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
        monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
        monkeypatch.setenv("NODECYCLE_EIP_POOL_ALLOCATE_WHEN_EMPTY", "true")
    ec2.lag = 3
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))

    # When the launch runs until it goes on
    done = run_past(eip_fn, stack, record, Step.ASSIGN_EIP)

    # Then the instance holds the address allocated for it, the only one: none allocated again for an address
    # taken for released (in pool mode, a pool grown for good), and no failure counted for the alarm
    assert done.step is Step.READY_GATE
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert address.get("InstanceId") == instance
    assert done.allocation_id == address["AllocationId"]
    out = capsys.readouterr().out
    assert metric(out, "EipsAllocated") == 1
    assert metric(out, "EipFailures") == 0
    if mode == "pool":
        assert {tag["Key"]: tag["Value"] for tag in address["Tags"]}[POOL_TAG] == "ci"


def test_an_allocation_whose_answer_was_lost_is_found_by_its_tags_and_the_instance_ends_with_one_address(
    eip_fn: ModuleType,
    stack: Stack,
    ec2: AwsLikeEc2,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given EC2 that allocates an address whose answer never comes (a read timeout past botocore's retries),
    # and that does not know a new address for the next two calls naming or listing it
    ec2.lag = 2
    allocate_as_ec2_does = ec2.allocate_address

    def answer_lost(**kwargs: Any) -> Any:
        allocate_as_ec2_does(**kwargs)
        monkeypatch.setattr(ec2, "allocate_address", allocate_as_ec2_does)
        raise ReadTimeoutError(endpoint_url="https://ec2.eu-west-1.amazonaws.com/")

    monkeypatch.setattr(ec2, "allocate_address", answer_lost)
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))

    # When the launch runs until it goes on
    done = run_past(eip_fn, stack, record, Step.ASSIGN_EIP)

    # Then the address whose answer was lost was found by its tags: the instance holds one address, and the one
    # allocated while EC2 did not list the first yet is released, not left unassociated
    assert done.step is Step.READY_GATE
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert (address.get("InstanceId"), done.allocation_id) == (instance, address["AllocationId"])
    # And the one failure counted is the lost answer's
    assert metric(capsys.readouterr().out, "EipFailures") == 1
