"""The eip function on moto: a launch gets a verified address, a terminate gives it back, duplicates and
crashes leave one address, quota exhaustion ends the launch as configured.

moto lacks some of AWS's answers (no address quota; it releases an associated address silently; it lets a
terminated instance take an address): the function's EC2 client is the AwsLikeEc2 of conftest.py, which
gives them as AWS does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from types import ModuleType
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.domain.eip import SCRATCH
from nodecycle.domain.model import ADDRESSES_LEFT, Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, GROUP_TAG, INSTANCE_TAG, OWNER_TAG
from nodecycle.entrypoints import BatchFailed
from nodecycle_sandbox.aws import ec2_addresses
from tests.functions.eip.conftest import (
    AwsLikeEc2,
    Clock,
    addresses,
    allocate,
    current,
    deny,
    given,
    now,
    run_instances,
    run_while,
    work_event,
)
from tests.support.emf import metric
from tests.support.functions import FUNCTIONS, LambdaContext
from tests.support.stack import Stack, receive_all
from tests.unit.eip.fakes import GROUP, launch_record, state_change_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


def work(queue_url: str) -> list[dict[str, Any]]:
    return [json.loads(message["Body"]) for message in receive_all(queue_url)]


def failures(response: dict[str, Any]) -> list[dict[str, str]]:
    return list(response.get("batchItemFailures", []))


def test_a_launch_gets_a_tagged_address_associated_and_verified_then_goes_to_the_readiness_gate(
    eip_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a launching instance whose lifecycle is at ASSIGN_EIP
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))

    # When the eip function gets the work message
    response = eip_fn.handler(work_event(record), LambdaContext())

    # Then the instance holds a new address, tagged at its creation with owner, instance, group and time
    assert failures(response) == []
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert address["InstanceId"] == instance
    tags = {tag["Key"]: tag["Value"] for tag in address["Tags"]}
    assert tags[INSTANCE_TAG] == instance
    assert tags[GROUP_TAG] == GROUP
    assert datetime.fromisoformat(tags[ALLOCATED_AT_TAG]) <= now()
    # And the record holds the allocation, and the drain function has the readiness gate's message
    updated = current(stack, record)
    assert updated.step is Step.READY_GATE
    assert updated.allocation_id == address["AllocationId"]
    assert updated.public_ip == address["PublicIp"]
    assert work(stack.drain_queue) == [{"record_id": record.id, "seq": 1, "step": "ready-gate"}]
    assert metric(capsys.readouterr().out, "EipsAllocated") == 1


def test_terminate_releases_the_address_and_goes_to_completion(
    eip_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance that got its address at launch, and now terminates (drained)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    terminate = given(stack, terminate_record(instance, at=now()))

    # When the eip function gets the RELEASE_EIP message
    response = eip_fn.handler(work_event(terminate), LambdaContext())

    # Then the address is released, the eip function completes the action where the record is, and the
    # drain function has only the cleanup's message
    assert failures(response) == []
    assert addresses(**{f"tag:{OWNER_TAG}": OWNER}) == []
    done = current(stack, terminate)
    assert (done.step, done.completed_at is not None) == (Step.CLEANUP, True)
    # (three commits: the release's, the completion's claim before its call, the completion's)
    assert {"record_id": terminate.id, "seq": 3, "step": "cleanup"} in work(stack.drain_queue)
    assert metric(capsys.readouterr().out, "EipsReleased") == 1


def test_a_late_stop_event_leaves_the_address_of_an_instance_started_again(
    eip_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance that got its address at launch, then was stopped outside the hooks and started again
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    stopped_at = now()
    ec2 = boto3.client("ec2")
    ec2.stop_instances(InstanceIds=[instance])
    ec2.start_instances(InstanceIds=[instance])

    # When the stop's RELEASE_EIP message comes late (a retried event, a slow queue)
    stop = given(stack, state_change_record(instance, at=stopped_at))
    response = eip_fn.handler(work_event(stop), LambdaContext())

    # Then the running instance keeps its address, and the stop's lifecycle is over
    assert failures(response) == []
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert address.get("InstanceId") == instance
    assert current(stack, stop).step is Step.DONE
    assert metric(capsys.readouterr().out, "EipsReleased") == 0


def test_a_launch_message_delivered_twice_in_one_batch_leaves_one_address(
    eip_fn: ModuleType, stack: Stack
) -> None:
    # Given the same work message twice in a batch (SQS delivers at least once)
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))

    # When the function handles the batch
    response = eip_fn.handler(work_event(record, record), LambdaContext())

    # Then the instance has one address
    assert failures(response) == []
    assert [a["InstanceId"] for a in addresses(**{f"tag:{OWNER_TAG}": OWNER})] == [instance]


def test_a_launch_redelivered_after_a_crash_between_allocation_and_association_leaves_one_address(
    eip_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given a first delivery that dies right after AllocateAddress (AllocateAddress has no idempotency token)
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))
    ec2.failures["associate_address"] = [RuntimeError("the Lambda timed out")]
    with pytest.raises(BatchFailed):  # the whole batch failed: SQS delivers it again
        eip_fn.handler(work_event(record), LambdaContext())
    (leftover,) = addresses(**{f"tag:{INSTANCE_TAG}": instance})
    assert "AssociationId" not in leftover

    # When SQS delivers the message again
    second = eip_fn.handler(work_event(record), LambdaContext())

    # Then the address tagged for the instance is associated, and no second one exists
    assert failures(second) == []
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert address["AllocationId"] == leftover["AllocationId"]
    assert address["InstanceId"] == instance
    assert current(stack, record).allocation_id == leftover["AllocationId"]


def test_a_denied_instance_lookup_is_a_refusal_asked_again_not_a_failed_message(
    eip_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given a launch whose instance cannot take an address (terminated since: EC2 answers InvalidInstanceID,
    # and the step asks for the instance's state), and a role EC2 denies DescribeInstances (a service control
    # policy; the other calls allowed)
    (instance,) = run_instances(1)
    boto3.client("ec2").terminate_instances(InstanceIds=[instance])
    record = given(stack, launch_record(instance, at=now()))
    deny(ec2.moto, "DescribeInstances")

    # When the eip function gets the ASSIGN_EIP message
    response = eip_fn.handler(work_event(record), LambdaContext())

    # Then the denial is a refusal like any other EC2 denial: asked again later by the step itself (then the
    # failure policy decides), not a failed message that SQS redelivers until its dead-letter queue
    assert failures(response) == []
    waiting = current(stack, record)
    assert (waiting.step, waiting.extra[SCRATCH]["refused"]) == (Step.ASSIGN_EIP, 1)
    # And the address allocated for the instance is kept, tagged, for the next run
    (address,) = addresses(**{f"tag:{INSTANCE_TAG}": instance})
    assert "AssociationId" not in address


def test_a_denied_instance_lookup_on_a_stop_leaves_the_address_to_the_sweeper_and_the_lifecycle_goes_on(
    eip_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given an instance that got its address at launch and was stopped outside the hooks, and a role EC2 now
    # denies DescribeInstances (which tells whether the instance runs again)
    (instance,) = run_instances(1)
    eip_fn.handler(work_event(given(stack, launch_record(instance, at=now()))), LambdaContext())
    stop = given(stack, state_change_record(instance, at=now()))
    boto3.client("ec2").stop_instances(InstanceIds=[instance])
    deny(ec2.moto, "DescribeInstances")

    # When the stop's RELEASE_EIP message comes
    response = eip_fn.handler(work_event(stop), LambdaContext())

    # Then the lifecycle goes on with its address left where it is, to the sweeper, as for any other denial
    assert failures(response) == []
    done = current(stack, stop)
    assert (done.step, done.extra.get(ADDRESSES_LEFT)) == (Step.DONE, True)
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert address.get("InstanceId") == instance


@pytest.mark.parametrize(
    ("policy", "step", "result"),
    [("abandon", Step.DONE, ActionResult.ABANDON), ("continue", Step.READY_GATE, None)],
)
def test_an_exhausted_address_quota_ends_the_launch_as_configured(
    eip_fn: ModuleType,
    stack: Stack,
    ec2: AwsLikeEc2,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    policy: str,
    step: Step,
    result: ActionResult | None,
) -> None:
    # Given an account at its Elastic IP quota (moto has none: the AWS-like client answers
    # AddressLimitExceeded as AWS does), and a failure policy that decides at once (EipWaitSeconds 0)
    monkeypatch.setenv("NODECYCLE_EIP_FAILURE_POLICY", policy)
    monkeypatch.setenv("NODECYCLE_EIP_WAIT_SECONDS", "0")
    ec2.quota = 0
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))

    # When the launch asks for an address
    response = eip_fn.handler(work_event(record), LambdaContext())

    # Then it is abandoned (completed with ABANDON, by the eip function itself) or goes on to the
    # readiness gate (the drain function's) without an address
    assert failures(response) == []
    updated = current(stack, record)
    assert updated.step is step
    assert updated.result is result
    assert updated.outcome is not None
    assert updated.outcome.startswith("eip-failed: address quota exceeded")
    assert updated.allocation_id is None
    handed_over = [] if step is Step.DONE else [{"record_id": record.id, "seq": 1, "step": step.value}]
    assert work(stack.drain_queue) == handed_over
    assert (updated.completed_at is not None) == (step is Step.DONE)
    assert metric(capsys.readouterr().out, "EipFailures") == 1


def test_a_launch_whose_duplicate_took_the_last_address_of_the_quota_for_it_keeps_that_address(
    eip_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an account with room for one more Elastic IP (the sandbox's EC2 answers AddressLimitExceeded past
    # its quota), and a launch whose message SQS delivered twice at the same moment: the other delivery
    # allocates for the instance between this one's listing and its own AllocateAddress, taking that room
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))
    ec2_addresses.set_quota(ec2_backends[ACCOUNT_ID][os.environ["AWS_DEFAULT_REGION"]], 1)
    allocate_as_ec2_does = ec2.allocate_address

    def after_the_duplicate(**kwargs: Any) -> Any:
        stamp = now().isoformat(timespec="seconds")  # (allocated at this very moment)
        allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: instance, GROUP_TAG: GROUP, ALLOCATED_AT_TAG: stamp})
        return allocate_as_ec2_does(**kwargs)

    monkeypatch.setattr(ec2, "allocate_address", after_the_duplicate)

    # When this delivery's AllocateAddress is refused for the quota
    response = eip_fn.handler(work_event(record), LambdaContext())

    # Then the launch takes the address allocated for its instance and goes on, rather than be abandoned
    assert failures(response) == []
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert address.get("InstanceId") == instance
    updated = current(stack, record)
    assert (updated.step, updated.result, updated.allocation_id) == (
        Step.READY_GATE,
        None,
        address["AllocationId"],
    )


def test_a_pool_launch_whose_duplicate_grew_the_pool_to_the_quota_for_it_keeps_that_address(
    eip_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an empty pool that may grow, an account with room for one more Elastic IP (the sandbox's EC2
    # answers AddressLimitExceeded past its quota), and a launch whose message SQS delivered twice at the same
    # moment: the other delivery grows the pool for the instance between this one's listing and its own
    # AllocateAddress, taking that room
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_ALLOCATE_WHEN_EMPTY", "true")
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))
    ec2_addresses.set_quota(ec2_backends[ACCOUNT_ID][os.environ["AWS_DEFAULT_REGION"]], 1)
    allocate_as_ec2_does = ec2.allocate_address

    def after_the_duplicate(**kwargs: Any) -> Any:
        tags = {OWNER_TAG: OWNER, INSTANCE_TAG: instance, GROUP_TAG: GROUP, ALLOCATED_AT_TAG: "2026-01-01"}
        allocate(**tags, **{"nodecycle:pool": "ci"})
        return allocate_as_ec2_does(**kwargs)

    monkeypatch.setattr(ec2, "allocate_address", after_the_duplicate)

    # When this delivery's AllocateAddress is refused for the quota
    response = eip_fn.handler(work_event(record), LambdaContext())

    # Then the launch takes the pool address grown for its instance and goes on, rather than be abandoned
    assert failures(response) == []
    (address,) = addresses(**{"tag:nodecycle:pool": "ci"})
    assert address.get("InstanceId") == instance
    updated = current(stack, record)
    assert (updated.step, updated.result, updated.allocation_id) == (
        Step.READY_GATE,
        None,
        address["AllocationId"],
    )


def test_a_pool_launch_claims_a_pool_address_and_terminate_returns_it(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of one address, tagged for this stack
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pooled = allocate(**{OWNER_TAG: OWNER, "nodecycle:pool": "ci"})
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))

    # When the instance launches, Then it holds the pool address
    eip_fn.handler(work_event(launch), LambdaContext())
    (address,) = addresses(**{"tag:nodecycle:pool": "ci"})
    assert (address["AllocationId"], address.get("InstanceId")) == (pooled, instance)

    # When it terminates, Then the address is free in the pool again, not released
    terminate = given(stack, terminate_record(instance, at=now()))
    eip_fn.handler(work_event(terminate), LambdaContext())
    (address,) = addresses(**{"tag:nodecycle:pool": "ci"})
    assert address["AllocationId"] == pooled
    assert "AssociationId" not in address


def test_a_body_that_is_not_a_work_message_is_dropped_without_failing_the_batch(
    eip_fn: ModuleType, stack: Stack
) -> None:
    (instance,) = run_instances(1)
    record = given(stack, launch_record(instance, at=now()))
    event = work_event(record)
    event["Records"].insert(0, {**event["Records"][0], "messageId": "garbage", "body": "{not json"})

    response = eip_fn.handler(event, LambdaContext())

    assert failures(response) == []
    assert current(stack, record).step is Step.READY_GATE


def test_the_eip_function_does_not_import_the_kubernetes_client(stack: Stack) -> None:
    # Given a fresh interpreter with the function's environment
    script = f"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("eip_app", {str(FUNCTIONS / "eip" / "app.py")!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from nodecycle.wiring import eip, sweeper
eip.engine(); eip.address_sweep(sweeper.settings(), sweeper.shared())
print(sorted(name for name in sys.modules if name == "kubernetes" or name.startswith("kubernetes.")))
"""
    # When it loads the handler and builds its services, Then no Kubernetes module is imported
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ), check=True
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_terminate_leaves_a_locked_address_to_the_sweeper_at_once_and_completes(
    eip_fn: ModuleType, stack: Stack
) -> None:
    # Given an instance that got its address at launch, the address since locked by AWS (ReleaseAddress refused:
    # InvalidAddress.Locked, which no wait changes), and the instance now terminating (drained)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    ec2_addresses.lock(ec2_backends[ACCOUNT_ID][os.environ["AWS_DEFAULT_REGION"]], address["AllocationId"])
    terminate = given(stack, terminate_record(instance, at=now()))

    # When the eip function runs its RELEASE_EIP, each run when due
    done = run_while(eip_fn, stack, Clock(), terminate, Step.RELEASE_EIP)

    # Then the lifecycle goes on at once, the address left to the sweeper (disassociated, still allocated)
    assert done.step is not Step.RELEASE_EIP
    assert done.extra.get(ADDRESSES_LEFT) is True
    (left,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert "InstanceId" not in left
    assert done.seq - terminate.seq <= 3, done.seq - terminate.seq
