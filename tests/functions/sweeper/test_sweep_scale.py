"""What one sweep costs at scale, on moto: 1,000 open lifecycles and 500 addresses of this owner (an Elastic IP
fleet: no cluster). The design says the sweeper's AWS calls grow with pages, not with items; the items that
need work (an address to release) cost their own calls, and nothing else does."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.domain.model import Step
from nodecycle_sandbox.aws.install import install
from tests.functions.intake.conftest import GROUP, make_group
from tests.functions.sweeper.test_sweeper_function import (
    OWNER,
    on_the_hook_of,
    record,
    store,
    under_a_hook_of,
)
from tests.support.events import load_event
from tests.support.functions import AwsLatency, LambdaContext, load_function
from tests.support.stack import Stack

PER_CALL = 0.1  # seconds: an AWS call under load (moto answers in a millisecond)


@pytest.fixture
def calls(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Any:
    install()
    monkeypatch.setenv("NODECYCLE_CLUSTER_NAME", "")
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    make_group(GROUP)
    latency = AwsLatency(per_call=PER_CALL)
    with latency.counting():
        yield latency


def fleet(stack: Stack, *, lifecycles: int, dangling: int, in_use: int) -> None:
    """Open lifecycles waiting normally (their next step not due, no heartbeat due before the next sweep), and
    addresses of this owner: ``dangling`` unassociated for an hour, ``in_use`` on running instances."""
    now = datetime.now(UTC)
    records = store(stack)
    for n in range(lifecycles):
        # (due an hour ahead: on a loaded machine making the fleet on moto takes minutes, and steps due a minute after
        # its start were overdue when the sweep came, each resent with three calls, and the sweep ran out of time)
        waiting = record(f"i-{n:017x}", Step.RELEASE_EIP, now + timedelta(hours=1), now)
        # (the group's hook of 7200 s put once, not once per record: a new client and a call each, half of the
        # test's CPU)
        waiting = under_a_hook_of(waiting, 7200) if n == 0 else on_the_hook_of(waiting, 7200)
        assert records.create(waiting)
    ec2 = boto3.client("ec2")
    hour_ago = (now - timedelta(hours=1)).isoformat()
    instances = (
        [
            i["InstanceId"]
            for i in ec2.run_instances(ImageId="ami-12c6146b", MinCount=in_use, MaxCount=in_use)["Instances"]
        ]
        if in_use
        else []
    )
    for n in range(dangling + in_use):
        tags: list[Any] = [
            {"Key": "nodecycle:owner", "Value": OWNER},
            {"Key": "nodecycle:allocated-at", "Value": hour_ago},
        ]
        allocation = ec2.allocate_address(
            Domain="vpc", TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": tags}]
        )["AllocationId"]
        if n >= dangling:
            ec2.associate_address(AllocationId=allocation, InstanceId=instances[n - dangling])


def sweep(sweeper: ModuleType, latency: AwsLatency) -> tuple[dict[str, int], Counter[str], float]:
    """One sweep: its report, its AWS calls by operation, and the seconds they took at PER_CALL each."""
    latency.operations.clear()
    context = LambdaContext(remaining_millis=300_000, clock=latency)  # the sweeper's timeout
    report = sweeper.handler(load_event("sweeper-schedule.json"), context)
    return report, Counter(latency.operations), latency.calls * PER_CALL


def test_a_sweep_of_1000_open_lifecycles_and_500_addresses_costs_pages_and_the_releases_only(
    stack: Stack, calls: AwsLatency
) -> None:
    # Given 1,000 open lifecycles of this owner waiting normally, and 500 addresses of this owner: 250 left
    # unassociated for an hour, 250 on running instances
    fleet(stack, lifecycles=1_000, dangling=250, in_use=250)
    sweeper = load_function("sweeper")

    # When the scheduled sweep runs, each AWS call taking 0.1 s
    report, operations, seconds = sweep(sweeper, calls)

    # Then it finishes within its timeout, not cut short: the 250 dangling addresses released (one describe
    # and one release each), the 250 in use kept; the open lifecycles listed in pages (DynamoDB's 1 MB), the
    # addresses in one call, their instances in batches of 200; no call per open lifecycle
    assert report["OpenLifecycles"] == 1_000
    assert report["EipsReleasedBySweep"] == 250
    assert operations["ReleaseAddress"] == 250
    assert operations["DescribeAddresses"] == 1 + 250
    assert operations["DescribeInstances"] == 2
    assert operations["Query"] <= 3
    # (the hooks read once per group and sweep, whose timeouts time the open actions' heartbeats: not per lifecycle)
    assert operations["DescribeLifecycleHooks"] == 1
    per_item = {"ReleaseAddress", "DescribeAddresses"}
    fixed = {op: n for op, n in operations.items() if op not in per_item}
    assert sum(fixed.values()) <= 12, fixed
    assert seconds < 300 - 45

    # And the next sweep, with nothing left to release, costs the pages alone
    report, operations, seconds = sweep(sweeper, calls)
    assert report["EipsReleasedBySweep"] == 0
    assert operations["DescribeAddresses"] == 1
    assert operations["DescribeLifecycleHooks"] == 1
    assert operations.total() <= 12, operations
