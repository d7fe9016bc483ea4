"""A pool of nine free addresses, eight of them refused to AssociateAddress for their own sake (a condition on their
tags: UnauthorizedOperation, as EC2 answers a denial; EC2 documents no other refusal of an address to AssociateAddress:
a locked one is refused to ReleaseAddress alone), on moto through the eip function and the EC2 adapter. The one
address EC2 associates comes last in the instance's order: the launch used up its four looks on the refused ones
(two a look) and its policy abandoned it with that address free. Now it goes on past them and takes it."""

from __future__ import annotations

from types import ModuleType

import pytest

from nodecycle.domain.eip.assign import _draw
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from nodecycle_sandbox.aws.install import install
from tests.functions.eip.conftest import (
    AwsLikeEc2,
    Clock,
    addresses,
    allocate,
    deny,
    given,
    now,
    run_instances,
    run_while,
)
from tests.support.functions import load_function
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
POOL = "ci"


@pytest.fixture
def pool_fn(stack: Stack, ec2: AwsLikeEc2, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    install()
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", POOL)
    monkeypatch.setenv("NODECYCLE_EIP_FAILURE_POLICY", "abandon")
    return load_function("eip")


def test_a_launch_goes_past_the_refused_addresses_of_its_pool_to_the_one_it_may_take(
    pool_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given an instance, and a pool of nine free addresses all but the last of which (in its order) are refused
    (instance,) = run_instances(1)
    pool = [allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL}) for _ in range(9)]
    *refused, good = sorted(pool, key=lambda allocation_id: _draw(instance, allocation_id))
    deny(ec2.moto, "AssociateAddress", allocation_ids=refused)

    # When its launch runs, each run when due
    launched = run_while(
        pool_fn, stack, Clock(), given(stack, launch_record(instance, at=now())), Step.ASSIGN_EIP
    )

    # Then it holds the address it may take, the refused ones still free in the pool
    assert launched.result is not ActionResult.ABANDON, launched.outcome
    assert launched.allocation_id == good
    held = {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": POOL})}
    assert held == {**dict.fromkeys(refused), good: instance}
