"""An instance started again has the start's LaunchTime, as EC2 shows it (nodecycle_sandbox.aws.ec2_instances):
a stop and a start move it on, a start of a running instance does not. moto kept the first launch's."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws.group import SANDBOX_AMI
from nodecycle_sandbox.aws.install import install


@pytest.fixture
def ec2() -> Iterator[Any]:
    install()
    with mock_aws():
        yield boto3.client("ec2", region_name="eu-west-1")


def launch_time(ec2: Any, instance: str) -> Any:
    return ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"][0]["LaunchTime"]


def test_a_start_out_of_the_stopped_state_moves_the_launch_time_on(ec2: Any) -> None:
    instance = ec2.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"]
    launched = launch_time(ec2, instance)
    time.sleep(1.1)  # (LaunchTime has whole seconds)
    ec2.start_instances(InstanceIds=[instance])  # running already: nothing moves
    assert launch_time(ec2, instance) == launched
    ec2.stop_instances(InstanceIds=[instance])
    assert launch_time(ec2, instance) == launched
    ec2.start_instances(InstanceIds=[instance])
    assert launch_time(ec2, instance) > launched
