"""A launch whose every AssociateAddress EC2 refuses (the instance's side: it is not of a group the role may
associate with, a policy on it), its pool holding one free address, on moto through the eip function and the
EC2 adapter: its failure policy decides after a few looks, and a pool that grows when empty grows by one address
at most (each address allocated into a pool is never released). Before, once the refused address was skipped, a
look found the pool empty: the launch waited for EipWaitSeconds in line, or grew the pool at every look.

And a pool of nine free addresses, eight of them refused to AssociateAddress for their own sake (a condition on
their tags: UnauthorizedOperation, as EC2 answers a denial; EC2 documents no other refusal of an address to
AssociateAddress: a locked one is refused to ReleaseAddress alone), the one EC2 associates last in the instance's
order: the launch used up its four looks on the refused ones (two a look) and its policy abandoned it with that
address free. Now it goes on past them and takes it."""

from __future__ import annotations

from types import ModuleType

import pytest

from nodecycle.domain.eip.assign import REFUSED_ATTEMPTS, _draw
from nodecycle.domain.model import Step
from nodecycle.domain.policy import ActionResult
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from tests.functions.eip.conftest import (
    AwsLikeEc2,
    Clock,
    addresses,
    allocate,
    deny,
    given,
    now,
    pool_function,
    run_while,
)
from tests.functions.eip.test_instance_of_another_owner_refused import instance_of_the_group
from tests.support.stack import Stack
from tests.unit.eip.fakes import launch_record

OWNER = "stack-a"  # tests/conftest.py's stack
POOL = "ci"


@pytest.fixture(params=[False, True], ids=["fixed-pool", "growing-pool"])
def pool_fn(
    stack: Stack, ec2: AwsLikeEc2, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> ModuleType:
    return pool_function(monkeypatch, POOL, grows=request.param)


def test_a_launch_refused_every_association_meets_its_policy_and_grows_its_pool_by_one_at_most(
    pool_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given a pool of one free address, and an instance EC2 refuses every association to
    instance = instance_of_the_group(None)  # (its group's tags on it: the refusal is not its own)
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


def test_a_launch_goes_past_the_refused_addresses_of_its_pool_to_the_one_it_may_take(
    stack: Stack, ec2: AwsLikeEc2, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an instance, and a pool of nine free addresses all but the last of which (in its order) are refused
    instance = instance_of_the_group(None)  # (its group's tags on it: the refusal is not its own)
    pool = [allocate(**{OWNER_TAG: OWNER, POOL_TAG: POOL}) for _ in range(9)]
    *refused, good = sorted(pool, key=lambda allocation_id: _draw(instance, allocation_id))
    deny(ec2.moto, "AssociateAddress", allocation_ids=refused)

    # When its launch runs, each run when due
    launched = run_while(
        pool_function(monkeypatch, POOL),
        stack,
        Clock(),
        given(stack, launch_record(instance, at=now())),
        Step.ASSIGN_EIP,
    )

    # Then it holds the address it may take, the refused ones still free in the pool
    assert launched.result is not ActionResult.ABANDON, launched.outcome
    assert launched.allocation_id == good
    held = {a["AllocationId"]: a.get("InstanceId") for a in addresses(**{f"tag:{POOL_TAG}": POOL})}
    assert held == {**dict.fromkeys(refused), good: instance}
