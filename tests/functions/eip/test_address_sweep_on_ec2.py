"""The sweeper's EIP part on moto, through the eip wiring: what it frees and what it costs in API calls."""

from __future__ import annotations

import os
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.adapters.aws.address_lines import DynamoAddressLines
from nodecycle.domain.ports.addresses import ALLOCATED_AT_TAG, INSTANCE_TAG, OWNER_TAG, POOL_TAG
from nodecycle.observability import metrics
from nodecycle.wiring import sweeper
from nodecycle.wiring.eip import address_sweep
from nodecycle_sandbox.aws import ec2_addresses
from nodecycle_sandbox.aws.install import install
from tests.functions.eip.conftest import AwsLikeEc2, addresses, allocate, api_calls, run_instances
from tests.support.emf import metric
from tests.support.stack import Stack
from tests.unit.sweeper.test_orphans import AMPLE


def test_the_sweep_frees_what_was_left_behind_and_nothing_else_in_two_api_calls(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given, for this stack: a leaked address (unassociated for an hour), one a launch allocated a moment
    # ago, one on a live instance, and a pool address still associated with an instance shutting down (EC2
    # ends the association itself once the instance is terminated, as the sandbox's EC2 does)
    live, going = run_instances(2)
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")
    just_now = datetime.now(UTC).isoformat(timespec="seconds")
    ours = {OWNER_TAG: "stack-a"}
    leaked = allocate(**ours, **{INSTANCE_TAG: "i-0000000000000dead", ALLOCATED_AT_TAG: hour_ago})
    young = allocate(**ours, **{INSTANCE_TAG: "i-000000000000000ff", ALLOCATED_AT_TAG: just_now})
    in_use = allocate(**ours, **{INSTANCE_TAG: live, ALLOCATED_AT_TAG: hour_ago})
    pooled = allocate(**ours, **{POOL_TAG: "ci"})
    ec2.associate_address(AllocationId=in_use, InstanceId=live, AllowReassociation=False)
    ec2.associate_address(AllocationId=pooled, InstanceId=going, AllowReassociation=False)
    shutting_down(going)
    # and another stack's address, unassociated for an hour
    theirs = allocate(**{OWNER_TAG: "stack-b", ALLOCATED_AT_TAG: hour_ago})
    calls = api_calls(ec2.moto)

    # When the sweeper runs
    report = address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)

    # Then the leak is released, the pool address is free in its pool, everything else is as it was
    state = {a["AllocationId"]: a.get("InstanceId") or None for a in addresses()}
    assert state == {young: None, in_use: live, pooled: None, theirs: None}
    assert leaked not in state
    assert (report.released, report.returned) == (1, 1)
    # And it cost one DescribeAddresses and one DescribeInstances (then a look again and one call per
    # address it frees); the AWS-like client's own in-use check before a release counts one more
    assert calls["DescribeAddresses"] == 3
    assert calls["DescribeInstances"] == 1
    assert calls["ReleaseAddress"] == calls["DisassociateAddress"] == 1


def shutting_down(instance_id: str) -> None:
    """The instance's termination begun and not over: EC2 still shows it with its addresses (moto terminates at
    once)."""
    backend = ec2_backends[ACCOUNT_ID][os.environ["AWS_DEFAULT_REGION"]]
    state = backend.get_instance(instance_id)._state
    state.name, state.code = "shutting-down", 32


def test_an_address_a_launch_associates_after_the_listing_is_kept_where_ec2_would_release_it_in_use(
    stack: Stack, ec2: AwsLikeEc2
) -> None:
    # Given EC2 in a default VPC (ReleaseAddress disassociates an address in use and releases it without an
    # error), and an address unassociated for an hour that a launch associates once the sweep has listed it
    ec2.default_vpc = True
    (launching,) = run_instances(1)
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")
    address = allocate(**{OWNER_TAG: "stack-a", INSTANCE_TAG: launching, ALLOCATED_AT_TAG: hour_ago})
    launch = boto3.client("ec2")  # the launch's own client, not the sweeper's
    listed: list[bool] = []

    def associate_once_listed(**_: Any) -> None:
        if not listed:
            listed.append(True)
            launch.associate_address(AllocationId=address, InstanceId=launching, AllowReassociation=False)

    ec2.moto.meta.events.register("after-call.ec2.DescribeAddresses", associate_once_listed)

    # When the sweeper runs
    report = address_sweep(sweeper.settings(), sweeper.shared())(AMPLE)

    # Then the address stays with the launch
    assert [(a["AllocationId"], a.get("InstanceId")) for a in addresses()] == [(address, launching)]
    assert report.released == 0


def test_an_address_aws_locked_is_told_once_tried_again_later_and_released_once_unlocked(
    stack: Stack, ec2: AwsLikeEc2, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given an address left unassociated for an hour, which AWS has locked (ReleaseAddress: InvalidAddress.Locked)
    install()  # (the sandbox's EC2 emulation, which locks an address as AWS does)
    hour_ago = (datetime.now(UTC) - timedelta(hours=1)).isoformat(timespec="seconds")
    locked = allocate(
        **{OWNER_TAG: "stack-a", INSTANCE_TAG: "i-0000000000000dead", ALLOCATED_AT_TAG: hour_ago}
    )
    ec2_addresses.lock(_backend(), locked)
    calls = api_calls(ec2.moto)

    # When the sweeper runs three times in a row (its schedule, every few minutes)
    reports = [address_sweep(sweeper.settings(), sweeper.shared())(AMPLE) for _ in range(3)]

    # Then no sweep fails for it: it is told once (one EipFailures), and tried at the first sweep only, the next try
    # later (a growing interval), the address kept
    metrics.flush_metrics()
    assert metric(capsys.readouterr().out, "EipFailures") == 1
    assert [report.kept for report in reports] == [1, 1, 1]
    assert calls["ReleaseAddress"] == 1
    assert [a["AllocationId"] for a in addresses()] == [locked]

    # And once AWS Support unlocks it, the sweep that comes at its next try releases it: nothing leaks
    ec2_addresses.unlock(_backend(), locked)
    lines = DynamoAddressLines(stack.table)
    read = lines.locks("stack-a")
    assert read.by[locked].tries == 1
    # (its next try come: as the sweep 15 minutes on finds it)
    due = {locked: replace(read.by[locked], next_try=datetime.now(UTC))}
    assert lines.keep_locks("stack-a", due, read.version)
    assert not lines.keep_locks("stack-a", {}, read.version)  # (written over the version read only)
    assert address_sweep(sweeper.settings(), sweeper.shared())(AMPLE).released == 1
    assert addresses() == []


def _backend() -> Any:
    return ec2_backends[ACCOUNT_ID][os.environ["AWS_DEFAULT_REGION"]]
