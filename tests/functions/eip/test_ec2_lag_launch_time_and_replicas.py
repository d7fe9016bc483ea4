"""EC2 that lags (nodecycle_sandbox.aws.ec2_consistency), as one view and not monotonic: a lagging caller's
DescribeInstances shows a start's LaunchTime only with its state (one answer, one moment), and reads armed with
``fresh`` go back and forth between a replica that has every write and one that lags (a later read older than an
earlier one), as EC2's reads do."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws.ec2_consistency import LAG, alternating
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
        yield clock
        LAG.disarm()


def _client(key: str) -> Any:
    return boto3.client("ec2", region_name=REGION, aws_access_key_id=key, aws_secret_access_key="testing")


def seen(ec2: Any, instance: str) -> tuple[str, Any]:
    """The instance's state and LaunchTime as one answer of ``ec2`` tells them."""
    found = ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": [instance]}])
    (item,) = [i for r in found["Reservations"] for i in r["Instances"]]
    return item["State"]["Name"], item["LaunchTime"]


def stopped_long_ago(operator: Any) -> tuple[str, Any]:
    """An instance stopped before the lag was armed, and its LaunchTime."""
    instance = str(
        operator.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    )
    operator.stop_instances(InstanceIds=[instance])
    time.sleep(1.1)  # (LaunchTime has whole seconds: the start's must differ)
    return instance, seen(operator, instance)[1]


def test_a_start_shows_its_launch_time_only_with_its_state(clock: Clock) -> None:
    fn, operator = _client(LAGGING), _client(OPERATOR)
    instance, launched = stopped_long_ago(operator)
    LAG.arm(WINDOW, [LAGGING], clock)

    # When the instance is started again
    operator.start_instances(InstanceIds=[instance])

    # Then within the window the lagging caller sees it stopped with its old LaunchTime (not the start's beside
    # the old state), the operator running with the new one
    assert seen(fn, instance) == ("stopped", launched)
    state, moved = seen(operator, instance)
    assert state == "running"
    assert moved > launched
    # And after it, both of the start
    clock.now += WINDOW + 0.1
    assert seen(fn, instance) == ("running", moved)


def test_reads_go_back_and_forth_between_replicas(clock: Clock) -> None:
    fn, operator = _client(LAGGING), _client(OPERATOR)
    instance, launched = stopped_long_ago(operator)
    address = operator.allocate_address(Domain="vpc")["AllocationId"]
    LAG.arm(WINDOW, [LAGGING], clock, fresh=alternating())

    # When the instance is started again and the address associated with it
    operator.start_instances(InstanceIds=[instance])
    operator.associate_address(AllocationId=address, InstanceId=instance, AllowReassociation=False)

    # Then the lagging caller's reads within the window see the latest state, then an older one, in turn
    state, moved = seen(fn, instance)
    assert state == "running"
    assert moved > launched
    assert seen(fn, instance) == ("stopped", launched)  # a later read, older than the earlier one
    assert seen(fn, instance) == ("running", moved)
    shown = [
        fn.describe_addresses(AllocationIds=[address])["Addresses"][0].get("InstanceId") for _ in range(3)
    ]
    assert shown == [None, instance, None]
    # And after it, every read the latest
    clock.now += WINDOW + 0.1
    assert [seen(fn, instance)[0] for _ in range(2)] == ["running", "running"]


def test_without_fresh_every_read_within_the_window_is_stale(clock: Clock) -> None:
    fn, operator = _client(LAGGING), _client(OPERATOR)
    instance, launched = stopped_long_ago(operator)
    LAG.arm(WINDOW, [LAGGING], clock)

    operator.start_instances(InstanceIds=[instance])

    # (the lag monotonic, as the existing tests rely on: no fresh answer before the window is over)
    assert [seen(fn, instance) for _ in range(3)] == [("stopped", launched)] * 3
