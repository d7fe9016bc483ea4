"""A terminate whose address EC2 refuses to take back for good: a service control policy denying
ec2:DisassociateAddress (``UnauthorizedOperation``, "with an explicit deny in a service control policy"), or the
refusal the DisassociateAddress reference documents for an address that is the only public IPv4 address of a network
interface with a public hostname. No wait changes such a refusal, and RELEASE_EIP runs before the completion and the
cleanup, the drained node still holding its budget slot: the step asks again once, shortly (a denial that was a
blip), then leaves the address to the instance's termination (EC2 disassociates it) and the sweeper, told once.
Before, it asked again for its ten attempts, 195 s of waits, the drained node holding its slot idle meanwhile
(invariant 10: no drain holds a slot past its timeout + force grace + a margin; the campaign's margin is 20 s)."""

from __future__ import annotations

from types import ModuleType

import pytest

from nodecycle.domain.model import ADDRESSES_LEFT, Step
from nodecycle.domain.ports.addresses import OWNER_TAG
from tests.functions.eip.conftest import (
    AwsLikeEc2,
    Clock,
    addresses,
    deny,
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
# What RELEASE_EIP may keep a drained node's slot for a refusal: within the campaign's margin past the drain
# (sandbox/nodecycle_sandbox/chaos/invariants.py SLOT_MARGIN, 20 s), with room for a redelivery
REFUSAL_HOLDS_AT_MOST = 10.0  # seconds


def test_a_terminate_leaves_an_address_ec2_refuses_to_take_back_within_seconds_told_once(
    eip_fn: ModuleType, stack: Stack, ec2: AwsLikeEc2, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an instance that got its address at launch, now terminating (drained), and EC2 denying the eip
    # function every DisassociateAddress from now on
    (instance,) = run_instances(1)
    launch = given(stack, launch_record(instance, at=now()))
    eip_fn.handler(work_event(launch), LambdaContext())
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    deny(ec2.moto, "DisassociateAddress")
    terminate = given(stack, terminate_record(instance, at=now()))
    capsys.readouterr()

    # When the eip function runs its RELEASE_EIP, each run when due
    clock = Clock()
    started = clock.now
    done = run_while(eip_fn, stack, clock, terminate, Step.RELEASE_EIP)

    # Then the lifecycle goes on within seconds, not minutes of waits, the address left on the instance (its
    # termination disassociates it; the sweeper releases it), told once, naming the address and EC2's refusal
    out = capsys.readouterr().out
    assert done.step is not Step.RELEASE_EIP
    assert clock.now - started <= REFUSAL_HOLDS_AT_MOST, clock.now - started
    assert done.extra.get(ADDRESSES_LEFT) is True
    (left,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert left.get("InstanceId") == instance
    assert metric(out, "EipFailures") == 1
    told = [line for line in out.splitlines() if '"level":"ERROR"' in line]
    assert any(address["PublicIp"] in line and "UnauthorizedOperation" in line for line in told), told
