"""A DisassociateAddress whose answer is lost (a read timeout after EC2 disassociated the address) is sent again by
botocore, and EC2 answers the retry ``InvalidAssociationID.NotFound``. The adapter tells that disassociation as this
call's (botocore retried: ``RetryAttempts`` > 0), one found ended at the first attempt as another's: so the
sweeper counts a pool address it returned so as returned (EipsReturnedBySweep, and the launches waiting in the
pool's line woken for it), where before it was kept, uncounted, and nobody woken. On moto, through the eip
wiring of the sweeper's address part."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.ports.addresses import INSTANCE_TAG, OWNER_TAG, POOL_TAG
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, run_instances
from tests.functions.eip.test_address_sweep_on_ec2 import shutting_down
from tests.support.stack import Stack
from tests.unit.sweeper.test_orphans import AMPLE


def disassociation_answered(ec2: Any, how: str) -> list[str]:
    """The next DisassociateAddress of ``ec2`` (a botocore client) is made by EC2 and then, ``lost``: its answer
    lost (a read timeout: botocore sends it again); ``raced``: made by another caller just before this call's
    first attempt. Returns the attempts sent."""
    elsewhere = boto3.client("ec2")  # (EC2's side of the call, or the other caller)
    sent: list[str] = []

    def before_send(request: Any, **_: Any) -> None:
        sent.append("DisassociateAddress")
        if len(sent) == 1:
            body = request.body.decode() if isinstance(request.body, bytes) else str(request.body)
            association = next(p.split("=", 1)[1] for p in body.split("&") if p.startswith("AssociationId="))
            elsewhere.disassociate_address(AssociationId=association)
            if how == "lost":
                raise ReadTimeoutError(endpoint_url=str(request.url))

    ec2.meta.events.register_first("before-send.ec2.DisassociateAddress", before_send)
    return sent


@pytest.mark.parametrize(("how", "ours"), [("lost", True), ("raced", False)])
def test_a_disassociation_whose_answer_was_lost_is_this_calls(stack: Stack, how: str, ours: bool) -> None:
    (instance,) = run_instances(1)
    pooled = allocate(**{OWNER_TAG: "stack-a", POOL_TAG: "ci"})
    ec2: Any = boto3.client("ec2")
    association = ec2.associate_address(AllocationId=pooled, InstanceId=instance)["AssociationId"]
    disassociation_answered(ec2, how)

    assert Ec2Addresses(ec2).disassociate(association) is ours
    assert [a.get("InstanceId") or None for a in addresses()] == [None]


def test_the_sweep_counts_a_pool_return_whose_answer_was_lost_as_returned(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given a pool address still on an instance shutting down, whose DisassociateAddress lands and whose answer
    # is lost on the way back
    (going,) = run_instances(1)
    pooled = allocate(**{OWNER_TAG: "stack-a", POOL_TAG: "ci", INSTANCE_TAG: "i-00000000000000abc"})
    ec2.associate_address(AllocationId=pooled, InstanceId=going, AllowReassociation=False)
    shutting_down(going)
    sent = disassociation_answered(ec2.moto, "lost")

    # When the sweeper runs
    report = address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)

    # Then the address is free in its pool, and counted as the sweep's return (before: kept, 0 returned)
    assert len(sent) == 2
    assert [a.get("InstanceId") or None for a in addresses()] == [None]
    assert report.returned == 1
