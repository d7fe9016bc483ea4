"""An Elastic IP with a reverse DNS record (a PTR record set on it): EC2 refuses to release it,
``InvalidAddress.PtrSet``, until the record is removed (the sandbox's EC2 answers so:
nodecycle_sandbox/aws/ec2_addresses.py ``set_reverse_dns``; moto releases it). The eip adapter takes the refusal
for a lock (``AddressLocked``): a terminate leaves the address to the sweeper at once, disassociated, rather than
holding its action minutes for a refusal no wait changes (the sweep tries it again at a growing interval, as it
does a locked one: tests/functions/eip/test_address_sweep_on_ec2.py)."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.domain.model import ADDRESSES_LEFT, Step
from nodecycle.domain.ports.addresses import OWNER_TAG
from nodecycle_sandbox.aws import ec2_addresses
from nodecycle_sandbox.aws.install import install
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    given,
    now,
    run_instances,
    run_while,
    work_event,
)
from tests.support.emf import metric
from tests.support.functions import LambdaContext
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


def _backend() -> Any:
    return ec2_backends[ACCOUNT_ID][os.environ["AWS_DEFAULT_REGION"]]


def test_the_sandbox_refuses_to_release_an_address_with_a_reverse_dns_record_until_it_is_removed(
    stack: Stack,
) -> None:
    # Given an address, unassociated, with a reverse DNS record set on it
    install()
    ec2: Any = boto3.client("ec2")
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2_addresses.set_reverse_dns(_backend(), allocation)

    # When it is released, Then EC2 refuses, the address kept
    with pytest.raises(ClientError) as refused:
        ec2.release_address(AllocationId=allocation)
    assert refused.value.response["Error"]["Code"] == "InvalidAddress.PtrSet"
    assert [a["AllocationId"] for a in ec2.describe_addresses()["Addresses"]] == [allocation]

    # And once the record is removed, it is released
    ec2_addresses.reset_reverse_dns(_backend(), allocation)
    ec2.release_address(AllocationId=allocation)
    assert ec2.describe_addresses()["Addresses"] == []


def test_a_terminate_leaves_an_address_with_a_reverse_dns_record_to_the_sweeper_at_once_told_once(
    eip_fn: ModuleType, stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance that got its address at launch, a reverse DNS record set on the address since, and the
    # instance now terminating (drained)
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    ec2_addresses.set_reverse_dns(_backend(), address["AllocationId"])
    terminate = given(stack, terminate_record(instance, at=now()))
    capsys.readouterr()

    # When the eip function runs its RELEASE_EIP, each run when due
    done = run_while(eip_fn, stack, Clock(), terminate, Step.RELEASE_EIP)

    # Then the lifecycle goes on at once (no minutes of retries), the address left to the sweeper: disassociated,
    # still allocated, told once
    assert done.step is not Step.RELEASE_EIP
    assert done.seq - terminate.seq <= 3, done.seq - terminate.seq
    assert done.extra.get(ADDRESSES_LEFT) is True
    (left,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert "InstanceId" not in left
    assert metric(capsys.readouterr().out, "EipFailures") == 1
