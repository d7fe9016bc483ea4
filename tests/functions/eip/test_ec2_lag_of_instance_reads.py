"""EC2 that lags (nodecycle_sandbox.aws.ec2_consistency), for the instance reads: a lagging caller's
DescribeInstances shows an instance's state and tags as they were ``seconds`` ago, and its DescribeAddresses still
shows the association a termination ended; other callers see the latest state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws.ec2_consistency import LAG
from nodecycle_sandbox.aws.group import SANDBOX_AMI
from nodecycle_sandbox.aws.install import install
from tests.functions.eip.conftest import Clock

REGION = "eu-west-1"
LAGGING = "AKIAFUNCTIONLAGGING1"  # a function's key: its reads lag
OPERATOR = "AKIATESTOPERATOR0001"  # the test's: it sees the latest state
WINDOW = 4.0


@pytest.fixture
def clock() -> Iterator[Clock]:
    install()
    clock = Clock()
    with mock_aws():
        LAG.arm(WINDOW, [LAGGING], clock)
        try:
            yield clock
        finally:
            LAG.disarm()


def _client(key: str) -> Any:
    return boto3.client("ec2", region_name=REGION, aws_access_key_id=key, aws_secret_access_key="testing")


@pytest.fixture
def fn() -> Any:
    return _client(LAGGING)


@pytest.fixture
def operator() -> Any:
    return _client(OPERATOR)


def seen(ec2: Any, instance: str) -> tuple[str, dict[str, str]]:
    """The instance's state and tags as ``ec2`` reads them (filtered by its id, as nodecycle reads it)."""
    found = ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": [instance]}])
    (item,) = [i for r in found["Reservations"] for i in r["Instances"]]
    return item["State"]["Name"], {tag["Key"]: tag["Value"] for tag in item.get("Tags", [])}


def launched_long_ago(clock: Clock, operator: Any) -> str:
    clock.now -= 60
    instance = str(
        operator.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    )
    clock.now += 60
    return instance


def test_a_termination_shows_to_a_lagging_caller_only_once_the_window_is_over(
    clock: Clock, fn: Any, operator: Any
) -> None:
    # Given an instance running for long, holding an address
    instance = launched_long_ago(clock, operator)
    clock.now -= 60
    address = operator.allocate_address(Domain="vpc")["AllocationId"]
    operator.associate_address(AllocationId=address, InstanceId=instance, AllowReassociation=False)
    clock.now += 60

    # When it is terminated
    operator.terminate_instances(InstanceIds=[instance])

    # Then within the window the lagging caller still sees it running, holding its address (EC2 disassociated it)
    assert seen(fn, instance)[0] == "running"
    (shown,) = fn.describe_addresses(AllocationIds=[address])["Addresses"]
    assert shown.get("InstanceId") == instance
    assert seen(operator, instance)[0] == "terminated"
    assert "InstanceId" not in operator.describe_addresses(AllocationIds=[address])["Addresses"][0]
    assert f"describe_instances {instance}" in LAG.lagged
    # And once the window is over, it sees the termination and the address free
    clock.now += WINDOW + 0.1
    assert seen(fn, instance)[0] == "terminated"
    assert "InstanceId" not in fn.describe_addresses(AllocationIds=[address])["Addresses"][0]


def test_a_stop_and_a_start_show_late_to_a_lagging_caller(clock: Clock, fn: Any, operator: Any) -> None:
    # Given an instance running for long
    instance = launched_long_ago(clock, operator)

    # When it is stopped
    operator.stop_instances(InstanceIds=[instance])

    # Then the lagging caller sees it running for the window, then stopped
    assert seen(fn, instance)[0] == "running"
    clock.now += WINDOW + 0.1
    assert seen(fn, instance)[0] == "stopped"
    # And when it is started again, stopped for the window (the state before the first change within it)
    operator.start_instances(InstanceIds=[instance])
    clock.now += 1
    assert seen(fn, instance)[0] == "stopped"
    clock.now += WINDOW
    assert seen(fn, instance)[0] == "running"


def test_an_instance_tag_just_written_shows_late_to_a_lagging_caller(
    clock: Clock, fn: Any, operator: Any
) -> None:
    # Given an instance running for long, tagged
    instance = launched_long_ago(clock, operator)
    clock.now -= 60
    operator.create_tags(Resources=[instance], Tags=[{"Key": "team", "Value": "a"}])
    clock.now += 60

    # When a tag is added and the other removed
    operator.create_tags(Resources=[instance], Tags=[{"Key": "role", "Value": "web"}])
    operator.delete_tags(Resources=[instance], Tags=[{"Key": "team"}])

    # Then the lagging caller sees the tags as before both within the window, the latest after it
    assert seen(fn, instance)[1] == {"team": "a"}
    assert seen(operator, instance)[1] == {"role": "web"}
    clock.now += WINDOW + 0.1
    assert seen(fn, instance)[1] == {"role": "web"}


def test_an_instance_untouched_within_the_window_is_seen_as_it_is(
    clock: Clock, fn: Any, operator: Any
) -> None:
    # Given two instances running for long, one of them stopped just now
    stopped, untouched = launched_long_ago(clock, operator), launched_long_ago(clock, operator)
    operator.stop_instances(InstanceIds=[stopped])

    # Then the other one is seen as it is, by the lagging caller, and nothing is said to have lagged for it
    assert seen(fn, untouched)[0] == "running"
    assert f"describe_instances {untouched}" not in LAG.lagged
    # And disarmed, the lagging caller sees the latest state at once
    LAG.disarm()
    assert seen(fn, stopped)[0] == "stopped"
