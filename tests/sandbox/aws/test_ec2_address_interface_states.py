"""AssociateAddress by a network interface, as EC2 answers it for the state of the instance the interface is attached
to: refused while that instance is pending or shutting down (``IncorrectInstanceState``, "The pending instance to
which 'eni-...' is attached is not in a valid state for this operation", EC2's answer), taken while it runs or is
stopped. moto associated the address whatever
the instance's state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle_sandbox.aws import ec2_addresses
from nodecycle_sandbox.aws.group import SANDBOX_AMI

REGION = "eu-west-1"


@pytest.fixture
def ec2() -> Iterator[Any]:
    ec2_addresses.install()
    with mock_aws():
        yield boto3.client("ec2", region_name=REGION)


def _launched(ec2: Any) -> tuple[str, str]:
    """An instance and its primary network interface."""
    (launched,) = ec2.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)["Instances"]
    (primary,) = [n["NetworkInterfaceId"] for n in launched["NetworkInterfaces"]]
    return launched["InstanceId"], primary


def _in_state(instance_id: str, state: str) -> None:
    """EC2 moves the instance to ``state`` (pending: starting again after a stop; shutting-down: terminating)."""
    instance = ec2_backends[ACCOUNT_ID][REGION].get_instance(instance_id)
    instance._state.name = state


def _associated(ec2: Any, allocation: str) -> str | None:
    (found,) = ec2.describe_addresses(AllocationIds=[allocation])["Addresses"]
    return found.get("AssociationId")


@pytest.mark.parametrize("state", ["pending", "shutting-down"])
def test_the_interface_of_an_instance_starting_or_going_takes_no_address(ec2: Any, state: str) -> None:
    # Given an instance's primary interface, the instance pending (started again after a stop) or shutting down
    instance, interface = _launched(ec2)
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    _in_state(instance, state)

    # When an address is associated by the interface, Then EC2 refuses it for the instance's state, and the address
    # stays free
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.associate_address(AllocationId=allocation, NetworkInterfaceId=interface, AllowReassociation=False)
    assert refused.value.response["Error"]["Code"] == "IncorrectInstanceState"
    assert (
        f"The {state} instance to which '{interface}' is attached"
        in refused.value.response["Error"]["Message"]
    )
    assert _associated(ec2, allocation) is None


@pytest.mark.parametrize("state", ["running", "stopped"])
def test_the_interface_of_an_instance_running_or_stopped_takes_an_address(ec2: Any, state: str) -> None:
    instance, interface = _launched(ec2)
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    if state == "stopped":
        ec2.stop_instances(InstanceIds=[instance])

    association = ec2.associate_address(
        AllocationId=allocation, NetworkInterfaceId=interface, AllowReassociation=False
    )["AssociationId"]

    assert _associated(ec2, allocation) == association
