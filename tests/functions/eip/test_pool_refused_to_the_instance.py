"""A launch whose every AssociateAddress EC2 refuses (the instance's side: it is not of a group the role may
associate with, a policy on it), its pool holding one free address, on moto through the eip function and the
EC2 adapter: its failure policy decides after a few looks, and a pool that grows when empty grows by one address
at most (each address allocated into a pool is never released). Before, once the refused address was skipped, a
look found the pool empty: the launch waited for EipWaitSeconds in line, or grew the pool at every look."""

from __future__ import annotations

from types import ModuleType

import pytest

from nodecycle.domain.eip.assign import REFUSED_ATTEMPTS
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


@pytest.fixture(params=[False, True], ids=["fixed-pool", "growing-pool"])
def pool_fn(
    stack: Stack, ec2: AwsLikeEc2, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> ModuleType:
    install()  # (CompleteLifecycleAction, which moto lacks)
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", POOL)
    monkeypatch.setenv("NODECYCLE_EIP_POOL_ALLOCATE_WHEN_EMPTY", "true" if request.param else "false")
    monkeypatch.setenv("NODECYCLE_EIP_FAILURE_POLICY", "abandon")
    return load_function("eip")


def test_a_launch_refused_every_association_meets_its_policy_and_grows_its_pool_by_one_at_most(
    pool_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given a pool of one free address, and an instance EC2 refuses every association to
    (instance,) = run_instances(1)
    allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL})
    deny(ec2.moto, "AssociateAddress")

    # When its launch runs, each run when due
    launched = run_while(
        pool_fn, stack, Clock(), given(stack, launch_record(instance, at=now())), Step.ASSIGN_EIP
    )

    # Then its failure policy decided, after REFUSED_ATTEMPTS looks, and its pool grew by one address at most
    assert launched.result is ActionResult.ABANDON
    assert launched.seq <= REFUSED_ATTEMPTS + 2
    assert len(addresses(**{f"tag:{POOL_TAG}": POOL})) <= 2
