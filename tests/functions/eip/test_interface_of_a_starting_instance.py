"""AssociateAddress by the primary interface of an instance with several, when the instance starts again between the
adapter's look at it and the association.

An instance of several network interfaces (the VPC CNI attaches more) is refused by its id; the adapter reads it
(DescribeInstances) and, when it runs or is stopped, associates the address with its primary interface. An instance
of a warm pool is stopped, and started again when the group takes it in: read stopped, it may be pending by the
time the association by its interface arrives (or read stopped by a replica behind the start). EC2 refuses an
address to an interface whose instance is pending (``IncorrectInstanceState``: "The pending instance to which
'eni-...' is attached is not in a valid state for this operation"); moto
associated it, and nothing in the sandbox met that refusal. The sandbox now answers as EC2
(nodecycle_sandbox/aws/ec2_addresses.py): the adapter must say the instance is unavailable (the step waits for a
pending one, and tries again), never that the address was taken, nor fail with EC2's code.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.ports.addresses import OWNER_TAG, InstanceUnavailable
from nodecycle_sandbox.aws.group import SANDBOX_AMI
from nodecycle_sandbox.aws.install import install

REGION = "eu-west-1"
OWNER = "stack-a"


class StartsBeforeTheAssociation:
    """An EC2 client through which the instance is started again (pending) right before an AssociateAddress by a
    network interface reaches EC2: the adapter read it stopped a moment before."""

    def __init__(self, ec2: Any, instance_id: str) -> None:
        self._ec2 = ec2
        self._instance_id = instance_id
        self.by_interface = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ec2, name)

    def associate_address(self, **kwargs: Any) -> Any:
        if "NetworkInterfaceId" in kwargs:
            self.by_interface += 1
            ec2_backends[ACCOUNT_ID][REGION].get_instance(self._instance_id)._state.name = "pending"
        return self._ec2.associate_address(**kwargs)


@pytest.fixture
def ec2(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    install()
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def _stopped_with_two_interfaces(ec2: Any) -> str:
    (launched,) = ec2.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)["Instances"]
    instance = str(launched["InstanceId"])
    second = ec2.create_network_interface(SubnetId=launched["SubnetId"])["NetworkInterface"]
    ec2.attach_network_interface(
        NetworkInterfaceId=second["NetworkInterfaceId"], InstanceId=instance, DeviceIndex=1
    )
    ec2.stop_instances(InstanceIds=[instance])
    return instance


def test_an_address_is_refused_to_the_interface_of_an_instance_started_since_it_was_read(ec2: Any) -> None:
    # Given a stopped instance of a warm pool with two interfaces, and an address of the owner
    instance = _stopped_with_two_interfaces(ec2)
    allocation = ec2.allocate_address(
        Domain="vpc",
        TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": [{"Key": OWNER_TAG, "Value": OWNER}]}],
    )["AllocationId"]
    client = StartsBeforeTheAssociation(ec2, instance)

    # When the address is associated with it, the instance starting again between the adapter's read of it
    # (stopped: its primary interface takes an address) and the association by that interface
    with pytest.raises(InstanceUnavailable):
        Ec2Addresses(client).associate(allocation, instance)  # type: ignore[arg-type]

    # Then the association by the interface was tried and refused: the address is on no instance
    assert client.by_interface == 1
    (address,) = ec2.describe_addresses(AllocationIds=[allocation])["Addresses"]
    assert (address.get("AssociationId"), address.get("InstanceId")) == (None, None)
