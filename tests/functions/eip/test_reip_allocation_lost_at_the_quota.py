"""An AllocateAddress whose answer is lost (a read timeout after EC2 allocated the address) at the account's last
free address, on moto under EC2 that lags (nodecycle_sandbox.aws.ec2_consistency) with the sandbox's address quota:
botocore sends the call again and EC2 refuses the retry, ``AddressLimitExceeded``, the quota taken by the first
attempt. The launch's listing does not show that address yet: it waits for the quota as any launch does, then finds
the address allocated for its instance and takes it. One address, no failure counted, nothing left over."""

from __future__ import annotations

import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any
from urllib.parse import parse_qs

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.adapters.aws import clients
from nodecycle.domain.model import Step
from nodecycle.domain.ports.addresses import OWNER_TAG
from nodecycle_sandbox.aws import ec2_addresses
from nodecycle_sandbox.aws.ec2_consistency import LAG
from tests.functions.eip.conftest import (
    Clock,
    addresses,
    allocate,
    given,
    lagging_clock,
    now,
    run_instances,
    run_while,
)
from tests.support.emf import metric
from tests.support.functions import load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
FUNCTION_KEY = "AKIAFUNCTIONEIPREIP4"  # the eip function's: its reads lag


@pytest.fixture
def clock(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    yield from lagging_clock(FUNCTION_KEY, monkeypatch)


@pytest.fixture
def eip_fn(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


def first_allocation_answer_lost() -> list[str]:
    """The eip function's next AllocateAddress is made by EC2 and its answer lost (botocore sends it again): the
    allocation ids so made."""
    made: list[str] = []
    operator: Any = boto3.client("ec2")

    def before_send(request: Any, **_: Any) -> None:
        if made:
            return
        body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
        params = {key: values[0] for key, values in parse_qs(body).items()}
        tags = [
            {
                "Key": params[f"TagSpecification.1.Tag.{n}.Key"],
                "Value": params[f"TagSpecification.1.Tag.{n}.Value"],
            }
            for n in range(1, 20)
            if f"TagSpecification.1.Tag.{n}.Key" in params
        ]
        spec = [{"ResourceType": "elastic-ip", "Tags": tags}]
        made.append(operator.allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"])
        raise ReadTimeoutError(endpoint_url=request.url)

    clients.client("ec2").meta.events.register_first("before-send.ec2.AllocateAddress", before_send)
    return made


def test_a_launch_whose_allocation_answer_is_lost_at_the_quota_takes_that_address(
    eip_fn: ModuleType, stack: Stack, clock: Clock, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an account one address short of its quota (another stack's address), EC2 whose reads lag the eip
    # function's writes by 6 s, and the launch's AllocateAddress whose answer is lost
    allocate(**{OWNER_TAG: "stack-b"})
    ec2_addresses.set_quota(ec2_backends[ACCOUNT_ID][os.environ["AWS_DEFAULT_REGION"]], 2)
    LAG.arm(6.0, [FUNCTION_KEY], clock)
    made = first_allocation_answer_lost()
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))

    # When its launch runs until it goes on
    started = clock.now
    launched = run_while(eip_fn, stack, clock, launch, Step.ASSIGN_EIP)

    # Then it holds the address its lost call allocated, within a look or two, no failure counted: no second
    # address, nothing left over
    assert launched.step is Step.READY_GATE
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert (address["AllocationId"], address.get("InstanceId")) == (made[0], instance)
    assert launched.allocation_id == made[0]
    assert clock.now - started <= 30, clock.now - started
    out = capsys.readouterr().out
    assert metric(out, "EipFailures") == 0
    # (botocore's retry was refused at the quota, and the listing did not show the address yet: it waited a look)
    assert "address quota exceeded; looking again in 15 s" in out
