"""A pool launch whose instance is in a VPC without an internet gateway, on moto with the sandbox's EC2 emulation,
through the eip function and the EC2 adapter: EC2 refuses every association with it ``Gateway.NotAttached``, whatever
the address (the EC2 error codes reference: "ensure that an internet gateway is attached to the relevant VPC").

The step took that refusal for the address's, as it takes a denial by a condition on an address's tags: it went on
past each address refused, two a look, 15 s apart, through the whole pool, and told each one refused to the pool's
line (PoolRefusals), where the launches of the group's other VPCs counted them refused (tried last, or waited for
another as for an empty pool). The refusal is the instance's: its policy decides after its REFUSED_ATTEMPTS looks,
one AssociateAddress each, and the line is told nothing."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.domain.eip.assign import REFUSED_ATTEMPTS
from nodecycle.domain.eip.line import line_key
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import (
    IMAGE,
    AwsLikeEc2,
    Clock,
    addresses,
    allocate,
    api_calls,
    current,
    due_now,
    given,
    now,
    pool_function,
    run_while,
    work_event,
)
from tests.support.functions import LambdaContext
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
POOL = "ci"


def instance_in_a_vpc_without_an_internet_gateway() -> str:
    ec2: Any = boto3.client("ec2")
    vpc = ec2.create_vpc(CidrBlock="10.9.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.9.1.0/24")["Subnet"]["SubnetId"]
    launched = ec2.run_instances(
        ImageId=IMAGE, MinCount=1, MaxCount=1, InstanceType="t4g.small", SubnetId=subnet
    )
    return str(launched["Instances"][0]["InstanceId"])


def test_a_launch_in_a_vpc_without_an_internet_gateway_meets_its_policy_and_tells_its_pool_nothing(
    stack: Stack, ec2: AwsLikeEc2, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of six free addresses, and an instance in a VPC without an internet gateway
    pool = [allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL}) for _ in range(6)]
    instance = instance_in_a_vpc_without_an_internet_gateway()
    calls = api_calls(ec2.moto)
    fn = pool_function(monkeypatch, POOL)
    record = given(stack, launch_record(instance, at=now()))

    # When its launch looks once
    response = fn.handler(work_event(due_now(stack, current(stack, record))), LambdaContext())
    assert response.get("batchItemFailures", []) == []

    # Then it tried one address, and told the pool's line none refused
    assert calls["AssociateAddress"] == 1
    assert ec2.refusals["Gateway.NotAttached"] == 1
    assert DynamoAddressLines(stack.table).refusals(line_key(OWNER, POOL)).by == {}

    # And when it runs on, each run when due, its policy decides after its looks, one association tried each
    launched = run_while(fn, stack, Clock(), record, Step.ASSIGN_EIP)
    assert launched.result is ActionResult.ABANDON
    assert "Gateway.NotAttached" in (launched.outcome or "")
    assert calls["AssociateAddress"] == REFUSED_ATTEMPTS
    # (every address of the pool still free in it)
    holders = {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": POOL})}
    assert holders == dict.fromkeys(pool)
