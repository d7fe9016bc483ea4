"""The eip function on moto against what EC2 does that moto does not: it is eventually consistent (a new address
or instance unknown for a while, right after its creation), and it throttles any call.

The function's EC2 client is the AwsLikeEc2 of conftest.py; a throttle is botocore's answer to one call
(``RequestLimitExceeded`` past the client's own retries), given where the adapter sends it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ReadTimeoutError

from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import INSTANCE_TAG, OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import (
    AwsLikeEc2,
    addresses,
    aws_error,
    due_now,
    given,
    now,
    run_instances,
    work_event,
)
from tests.support.emf import metric
from tests.support.functions import LambdaContext
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


def run_past(eip_fn: ModuleType, stack: Stack, record: LifecycleRecord, *steps: Step) -> LifecycleRecord:
    """Deliver the record's messages to the eip function, each as soon as it is due, until it is past ``steps``."""
    for _ in range(12):
        due = due_now(stack, record)
        if due.step not in steps:
            return due
        response = eip_fn.handler(work_event(due), LambdaContext())
        assert response.get("batchItemFailures", []) == []
    raise AssertionError(f"still at {due.step} after 12 runs")


def answer(ec2: Any, operation: str, parsed: dict[str, Any], status: int = 200) -> None:
    """The next ``operation`` call of ``ec2`` (a boto3 client) gets ``parsed`` as EC2's answer, once."""
    answered = False

    def once(**_: Any) -> tuple[AWSResponse, dict[str, Any]] | None:
        nonlocal answered
        if answered:
            return None
        answered = True
        return AWSResponse("https://ec2", status, HTTPHeaders(), None), parsed

    # (a before-call handler that answers is botocore's answer to the call)
    ec2.meta.events.register(f"before-call.ec2.{operation}", once)


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


def test_an_instance_ec2_does_not_know_yet_right_after_its_launch_is_waited_for_not_failed(
    eip_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance EC2 does not know yet, right after its launch: AssociateAddress answers
    # InvalidInstanceID.NotFound and DescribeInstances does not list it, once
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))
    message = f"The instance ID '{instance}' does not exist"
    ec2.failures["associate_address"] = [aws_error("InvalidInstanceID.NotFound", "AssociateAddress", message)]
    answer(ec2.moto, "DescribeInstances", {"Reservations": [], "ResponseMetadata": {}})

    # When the launch runs until it goes on
    first = eip_fn.handler(work_event(record), LambdaContext())
    waiting = due_now(stack, record)
    done = run_past(eip_fn, stack, record, Step.ASSIGN_EIP)

    # Then it waited for the instance (not judged gone, nor failed, nor dead-lettered), then got its address,
    # the one allocated on the first run
    assert first.get("batchItemFailures", []) == []
    assert (waiting.step, waiting.extra["eip"]["instance_attempts"]) == (Step.ASSIGN_EIP, 1)
    assert done.step is Step.READY_GATE
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert address.get("InstanceId") == instance
    assert metric(capsys.readouterr().out, "EipFailures") == 0


def test_a_throttle_of_any_ec2_call_of_a_launch_or_a_terminate_leaves_one_address_then_none(
    eip_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2
) -> None:
    # For each EC2 call a launch and its terminate make, in turn: that call throttled past botocore's retries
    throttled: list[str] = []
    for turn in range(1, 40):
        calls: list[str] = []

        def throttle(model: Any, turn: int = turn, calls: list[str] = calls, **_: Any) -> Any:
            calls.append(model.name)
            if len(calls) != turn:
                return None
            error = {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."}
            metadata = {"HTTPStatusCode": 503}
            return AWSResponse("https://ec2", 503, HTTPHeaders(), None), {
                "Error": error,
                "ResponseMetadata": metadata,
            }

        ec2.moto.meta.events.register("before-call.ec2.*", throttle)
        try:
            # Given a launching instance
            (instance,) = run_instances(1)
            launch = given(stack, launch_record(instance, at=now()))

            # When its launch runs until it goes on (each retry as soon as it is due)
            launched = run_past(eip_fn, stack, launch, Step.ASSIGN_EIP)

            # Then it holds one address, the one recorded
            (address,) = addresses(**{f"tag:{INSTANCE_TAG}": instance})
            assert (launched.step, address.get("InstanceId")) == (Step.READY_GATE, instance), calls
            assert launched.allocation_id == address["AllocationId"]

            # And when it terminates, its address is released and the action completed
            terminate = given(stack, terminate_record(instance, at=now()))
            over = run_past(eip_fn, stack, terminate, Step.RELEASE_EIP, Step.COMPLETE)
            assert addresses(**{f"tag:{INSTANCE_TAG}": instance}) == [], calls
            assert (over.step, over.completed_at is not None) == (Step.CLEANUP, True)
        finally:
            ec2.moto.meta.events.unregister("before-call.ec2.*", throttle)
        if len(calls) < turn:
            break  # past the last call: every one was throttled in turn
        throttled.append(calls[turn - 1])
    assert {"AllocateAddress", "AssociateAddress", "DescribeAddresses", "DisassociateAddress"} <= set(
        throttled
    )
    assert "ReleaseAddress" in throttled
