"""The sweeper's Elastic IP part on moto, with EC2 refusing, throttling and losing answers as AWS does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
from botocore.exceptions import ReadTimeoutError

from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, OWNER_TAG
from nodecycle.domain.sweep.addresses import AddressSweepReport
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, ec2
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
