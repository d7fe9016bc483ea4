"""The sweeper's Elastic IP part on moto, with EC2 refusing, throttling and losing answers as AWS does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse, HTTPHeaders
from botocore.exceptions import ReadTimeoutError

from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG
from nodecycle.domain.sweep.addresses import AddressSweepReport
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, ec2, run_instances
from tests.support.stack import Stack
from tests.unit.sweeper.test_orphans import AMPLE

__all__ = ["ec2"]  # (the AWS-like EC2 client fixture)

OWNER = "stack-a"  # the settings' owner id (tests/conftest.py)


def hour_ago() -> str:
    return (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")


def sweep() -> AddressSweepReport:
    return address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)


def state() -> dict[str, str | None]:
    return {a["AllocationId"]: a.get("InstanceId") or None for a in addresses()}


def test_a_release_that_landed_and_whose_answer_was_lost_is_the_sweeps_release(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given an address of this owner left unassociated for an hour, whose ReleaseAddress lands in EC2 but whose
    # answer is lost on the way back (a read timeout): botocore sends it again, and EC2 answers that allocation
    # InvalidAllocationID.NotFound
    dangling = allocate(**{OWNER_TAG: OWNER, ALLOCATED_AT_TAG: hour_ago()})
    sent: list[str] = []
    elsewhere = boto3.client("ec2")  # (EC2's side of the call: it lands)

    def answer_lost(request: Any, **_: Any) -> None:
        sent.append("ReleaseAddress")
        if len(sent) == 1:
            if dangling in {a["AllocationId"] for a in elsewhere.describe_addresses()["Addresses"]}:
                elsewhere.release_address(AllocationId=dangling)
            raise ReadTimeoutError(endpoint_url=str(request.url))

    ec2.moto.meta.events.register("before-send.ec2.ReleaseAddress", answer_lost)

    # When the sweeper runs
    report = sweep()

    # Then the address is gone, the retry's NotFound was success (no failure), and the release is counted as
    # the sweep's (before: 0 released and 1 kept, of an address that is no more)
    assert len(sent) == 2
    assert dangling not in state()
    assert report == AddressSweepReport(released=1, returned=0, kept=0)


def test_an_address_another_caller_released_between_the_look_and_the_release_is_not_the_sweeps(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given an address of this owner left unassociated for an hour, which another caller (a second sweep, an
    # operator) releases after this sweep's look and before its ReleaseAddress: EC2 answers that first attempt
    # InvalidAllocationID.NotFound
    dangling = allocate(**{OWNER_TAG: OWNER, ALLOCATED_AT_TAG: hour_ago()})
    sent: list[str] = []
    elsewhere = boto3.client("ec2")

    def released_elsewhere(**_: Any) -> None:
        sent.append("ReleaseAddress")
        if len(sent) == 1:
            elsewhere.release_address(AllocationId=dangling)

    ec2.moto.meta.events.register("before-send.ec2.ReleaseAddress", released_elsewhere)

    # When the sweeper runs
    report = sweep()

    # Then the address is gone with no failure, and not counted as the sweep's release (before: counted, as a
    # lost answer's retry is: the two told apart by botocore's retry)
    assert len(sent) == 1
    assert dangling not in state()
    assert report == AddressSweepReport(released=0, returned=0, kept=1)


def test_an_address_a_launch_associates_between_the_look_and_the_release_is_kept_in_use(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given an address unassociated for an hour (nondefault VPC: EC2 refuses to release an address in use),
    # which a redelivered launch associates (AllowReassociation=False) after the sweep looked at it again by
    # its allocation id, just before the sweep's ReleaseAddress
    (launching,) = run_instances(1)
    address = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: launching, ALLOCATED_AT_TAG: hour_ago()})
    launch = boto3.client("ec2")  # the launch's own client

    described: list[str] = []

    def associate_after_the_look(**_: Any) -> None:
        described.append("DescribeAddresses")
        if len(described) == 2:  # (the first is the listing, the second the look by allocation id)
            launch.associate_address(AllocationId=address, InstanceId=launching, AllowReassociation=False)

    ec2.moto.meta.events.register("after-call.ec2.DescribeAddresses", associate_after_the_look)

    # When the sweeper runs
    report = sweep()

    # Then the release is refused (InvalidIPAddress.InUse), the address stays with the launch, and nothing fails
    assert len(described) >= 2
    assert state() == {address: launching}
    assert report == AddressSweepReport(released=0, returned=0, kept=1)


@pytest.mark.parametrize("owner", ["stack-a-2", "stack", "stack-", "Stack-A", "xstack-a", "stack-a "])
def test_an_address_of_an_owner_whose_id_is_close_to_this_ones_is_never_touched(
    stack: Stack, ec2: AwsLikeEc2, owner: str
) -> None:
    # Given another owner's addresses, left unassociated for an hour and on a gone instance, whose owner id
    # begins with this one's, is a prefix of it, or differs in case only
    (gone,) = run_instances(1)
    theirs = allocate(**{OWNER_TAG: owner, ALLOCATED_AT_TAG: hour_ago()})
    on_gone = allocate(**{OWNER_TAG: owner, INSTANCE_TAG: gone, ALLOCATED_AT_TAG: hour_ago()})
    ec2.moto.associate_address(AllocationId=on_gone, InstanceId=gone, AllowReassociation=False)
    boto3.client("ec2").terminate_instances(InstanceIds=[gone])
    # (whether the terminated instance still shows the address is moto's to say, and moto says one thing or the
    # other depending on the tests run before in the process; EC2 disassociates it: the sweep is judged on
    # what it changes)
    before = state()
    assert set(before) == {theirs, on_gone}

    # When this owner's sweeper runs
    report = sweep()

    # Then neither is listed, released nor disassociated (invariant 3)
    assert report == AddressSweepReport()
    assert state() == before


def test_a_listing_ec2_throttles_past_the_retries_releases_nothing_and_fails_the_part(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given an address of this owner on a live instance and one unassociated for an hour, and DescribeAddresses
    # throttled at every attempt (RequestLimitExceeded, HTTP 503)
    (live,) = run_instances(1)
    kept = allocate(**{OWNER_TAG: OWNER, INSTANCE_TAG: live, ALLOCATED_AT_TAG: hour_ago()})
    ec2.moto.associate_address(AllocationId=kept, InstanceId=live, AllowReassociation=False)
    dangling = allocate(**{OWNER_TAG: OWNER, ALLOCATED_AT_TAG: hour_ago()})

    def throttled(**_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        error = {"Code": "RequestLimitExceeded", "Message": "Request limit exceeded."}
        return AWSResponse("https://ec2", 503, HTTPHeaders(), None), {"Error": error, "ResponseMetadata": {}}

    ec2.moto.meta.events.register("before-call.ec2.DescribeAddresses", throttled)

    # When the sweeper's address part runs, it fails as transient, having released nothing
    with pytest.raises(TransientError):
        sweep()
    ec2.moto.meta.events.unregister("before-call.ec2.DescribeAddresses", throttled)
    assert state() == {kept: live, dangling: None}
