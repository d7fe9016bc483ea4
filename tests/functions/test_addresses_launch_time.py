"""The EC2 adapter of the address steps on moto: when an instance was last started (its LaunchTime), which a
release after its action's completion reads to tell an instance started again since (a later launch's)."""

from __future__ import annotations

import boto3

from nodecycle.adapters.aws.addresses import Ec2Addresses
from tests.support.stack import Stack


def test_the_launch_time_of_an_instance_is_ec2s_and_none_for_an_instance_ec2_does_not_know(
    stack: Stack,
) -> None:
    ec2 = boto3.client("ec2")
    (instance,) = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1)["Instances"]

    addresses = Ec2Addresses()

    assert addresses.launched_at(instance["InstanceId"]) == instance["LaunchTime"]
    assert addresses.launched_at("i-0123456789abcdef0") is None
