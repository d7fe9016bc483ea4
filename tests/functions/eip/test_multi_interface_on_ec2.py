"""The eip function for an instance with several network interfaces (the VPC CNI attaches more), end to end on
the sandbox's EC2: AssociateAddress refuses such an instance by its id (InvalidInstanceID, "There are multiple
interfaces attached to instance"), the adapter associates the address with the primary interface, and
DescribeAddresses shows the instance the interface is attached to, as EC2 does
(nodecycle_sandbox/aws/ec2_addresses.py). The function's EC2 client is moto with the sandbox's emulation only,
no AwsLikeEc2: what it answers for interfaces is what these tests run on.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import boto3
import pytest

from nodecycle.adapters.aws import clients
from nodecycle.domain.model import LifecycleRecord, Step
from nodecycle.domain.ports.addresses import OWNER_TAG, POOL_TAG
from nodecycle.entrypoints import BatchFailed
from nodecycle_sandbox.aws.install import install
from tests.functions.eip.conftest import addresses, allocate, run_instances, store, work_event
from tests.support.functions import LambdaContext, load_function
from tests.support.stack import Stack, receive_all
from tests.unit.eip.fakes import launch_record, terminate_record

OWNER = "stack-a"  # tests/conftest.py's stack


@pytest.fixture
def eip_fn(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    install()  # the sandbox's EC2 addresses (and CompleteLifecycleAction, which the function calls)
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "allocate")
    return load_function("eip")


def _with_two_interfaces() -> tuple[str, str]:
    """A running instance that the VPC CNI gave a second interface: its id and its primary interface."""
    ec2: Any = boto3.client("ec2")
    (instance,) = run_instances(1)
    (described,) = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"]
    (primary,) = [n["NetworkInterfaceId"] for n in described["NetworkInterfaces"]]
    second = ec2.create_network_interface(SubnetId=described["SubnetId"])["NetworkInterface"]
    ec2.attach_network_interface(
        NetworkInterfaceId=second["NetworkInterfaceId"], InstanceId=instance, DeviceIndex=1
    )
    return instance, primary


def _given(stack: Stack, record: LifecycleRecord) -> LifecycleRecord:
    assert store(stack).create(record)
    return record


def _current(stack: Stack, record: LifecycleRecord) -> LifecycleRecord:
    found = store(stack).get(record.id)
    assert found is not None
    return found


def test_an_instance_with_two_interfaces_gets_its_address_on_the_primary_one_and_gives_it_back(
    eip_fn: ModuleType, stack: Stack
) -> None:
    # Given a launching instance with two network interfaces, whose lifecycle is at ASSIGN_EIP
    instance, primary = _with_two_interfaces()
    launch = _given(stack, launch_record(instance, at=datetime.now(UTC)))

    # When the eip function gets the launch's work message
    response = eip_fn.handler(work_event(launch), LambdaContext())

    # Then the address is on the primary interface, seen on the instance, verified: the launch goes on
    assert response.get("batchItemFailures", []) == []
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert (address.get("InstanceId"), address.get("NetworkInterfaceId")) == (instance, primary)
    launched = _current(stack, launch)
    assert (launched.step, launched.allocation_id) == (Step.READY_GATE, address["AllocationId"])

    # When the instance terminates (drained) and the eip function gets the RELEASE_EIP message
    terminate = _given(stack, terminate_record(instance, at=datetime.now(UTC)))
    response = eip_fn.handler(work_event(terminate), LambdaContext())

    # Then the address was found on the instance again and released: nothing of the stack's is left, and the
    # action is completed
    assert response.get("batchItemFailures", []) == []
    assert addresses(**{f"tag:{OWNER_TAG}": OWNER}) == []
    assert boto3.client("ec2").describe_addresses()["Addresses"] == []
    done = _current(stack, terminate)
    assert (done.step, done.completed_at is not None) == (Step.CLEANUP, True)


def test_a_stopped_instance_with_two_interfaces_takes_its_address_as_one_with_a_single_interface_does(
    eip_fn: ModuleType, stack: Stack
) -> None:
    # Given a stopped instance with two network interfaces at ASSIGN_EIP (EC2 associates an address with a
    # stopped instance: the sandbox takes a stopped instance of one interface by its id, as EC2 does)
    instance, primary = _with_two_interfaces()
    boto3.client("ec2").stop_instances(InstanceIds=[instance])
    launch = _given(stack, launch_record(instance, at=datetime.now(UTC)))

    # When the eip function gets the launch's work message
    response = eip_fn.handler(work_event(launch), LambdaContext())

    # Then the address is on its primary interface and the launch goes on, rather than waiting for a state
    # the instance will not reach (the adapter looked for the primary interface of a running instance only)
    assert response.get("batchItemFailures", []) == []
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert (address.get("InstanceId"), address.get("NetworkInterfaceId")) == (instance, primary)
    assert _current(stack, launch).step is Step.READY_GATE
    queued = [json.loads(m["Body"])["step"] for m in receive_all(stack.drain_queue)]
    assert queued == ["ready-gate"]


class _DiesAfterAssociating:
    """The function's EC2 client, whose first AssociateAddress to a network interface succeeds and then the
    Lambda dies (a timeout) before the step records it."""

    def __init__(self, ec2: Any) -> None:
        self.moto = ec2
        self.died = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.moto, name)

    def associate_address(self, **kwargs: Any) -> Any:
        associated = self.moto.associate_address(**kwargs)
        if "NetworkInterfaceId" in kwargs and not self.died:
            self.died = True
            raise RuntimeError("the Lambda timed out")
        return associated


def test_a_launch_redelivered_after_a_crash_past_the_association_keeps_the_address_of_its_primary_interface(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a first delivery for an instance with two interfaces that dies right after AssociateAddress put the
    # address on the primary interface
    instance, primary = _with_two_interfaces()
    launch = _given(stack, launch_record(instance, at=datetime.now(UTC)))
    dying = _DiesAfterAssociating(boto3.client("ec2"))
    made = clients.client
    monkeypatch.setattr(clients, "client", lambda service: dying if service == "ec2" else made(service))
    with pytest.raises(BatchFailed):  # the whole batch failed: SQS delivers it again
        eip_fn.handler(work_event(launch), LambdaContext())
    (held,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert (dying.died, held.get("InstanceId")) == (True, instance)

    # When SQS delivers the message again
    response = eip_fn.handler(work_event(launch), LambdaContext())

    # Then the launch keeps the address its instance holds (found by the instance), no second one is allocated
    assert response.get("batchItemFailures", []) == []
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert (address["AllocationId"], address.get("NetworkInterfaceId")) == (held["AllocationId"], primary)
    launched = _current(stack, launch)
    assert (launched.step, launched.allocation_id) == (Step.READY_GATE, held["AllocationId"])


def test_a_pool_address_goes_to_the_primary_interface_and_back_to_the_pool(
    eip_fn: ModuleType, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pool of one address and a launching instance with two interfaces
    monkeypatch.setenv("NODECYCLE_EIP_MODE", "pool")
    monkeypatch.setenv("NODECYCLE_EIP_POOL_NAME", "ci")
    pooled = allocate(**{OWNER_TAG: OWNER, POOL_TAG: "ci"})
    instance, primary = _with_two_interfaces()
    launch = _given(stack, launch_record(instance, at=datetime.now(UTC)))

    # When it launches, Then it holds the pool's address on its primary interface
    eip_fn.handler(work_event(launch), LambdaContext())
    (address,) = addresses(**{f"tag:{POOL_TAG}": "ci"})
    assert (address["AllocationId"], address.get("InstanceId"), address.get("NetworkInterfaceId")) == (
        pooled,
        instance,
        primary,
    )

    # When it terminates, Then the address was found on it and is free in the pool again, not released
    terminate = _given(stack, terminate_record(instance, at=datetime.now(UTC)))
    response = eip_fn.handler(work_event(terminate), LambdaContext())
    assert response.get("batchItemFailures", []) == []
    (address,) = addresses(**{f"tag:{POOL_TAG}": "ci"})
    assert address["AllocationId"] == pooled
    assert {"AssociationId", "InstanceId", "NetworkInterfaceId"} & set(address) == set()


def _operator_address_on(interface: str) -> str:
    """An address an operator put on ``interface`` by hand: no tag of this stack."""
    ec2: Any = boto3.client("ec2")
    allocation = str(ec2.allocate_address(Domain="vpc")["AllocationId"])
    ec2.associate_address(AllocationId=allocation, NetworkInterfaceId=interface, AllowReassociation=False)
    return allocation


def test_an_operators_address_on_the_primary_interface_is_not_moved_for_the_launch(
    eip_fn: ModuleType, stack: Stack
) -> None:
    # Given an instance with two interfaces whose primary one holds an operator's address
    instance, primary = _with_two_interfaces()
    operators = _operator_address_on(primary)
    launch = _given(stack, launch_record(instance, at=datetime.now(UTC)))

    # When it launches
    response = eip_fn.handler(work_event(launch), LambdaContext())

    # Then the operator's address is seen on the instance's primary private IP and stays there: the launch gets
    # none of the stack's (the failure policy, abandon by default, decides what follows)
    assert response.get("batchItemFailures", []) == []
    (kept,) = boto3.client("ec2").describe_addresses(AllocationIds=[operators])["Addresses"]
    assert (kept.get("InstanceId"), kept.get("NetworkInterfaceId")) == (instance, primary)
    assert addresses(**{f"tag:{OWNER_TAG}": OWNER}) == []
    assert "holds address" in (_current(stack, launch).outcome or "")


def test_an_operators_address_on_the_second_interface_leaves_the_primary_to_the_launch(
    eip_fn: ModuleType, stack: Stack
) -> None:
    # Given an instance with two interfaces whose second one holds an operator's address
    instance, primary = _with_two_interfaces()
    ec2: Any = boto3.client("ec2")
    (described,) = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"]
    (second,) = [
        n["NetworkInterfaceId"] for n in described["NetworkInterfaces"] if n["NetworkInterfaceId"] != primary
    ]
    operators = _operator_address_on(second)
    launch = _given(stack, launch_record(instance, at=datetime.now(UTC)))

    # When it launches, Then its own address is on the primary interface, the operator's untouched
    eip_fn.handler(work_event(launch), LambdaContext())
    (own,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert (own.get("InstanceId"), own.get("NetworkInterfaceId")) == (instance, primary)
    assert _current(stack, launch).step is Step.READY_GATE

    # When it terminates, Then only its own address is released; the operator's stays on the second interface
    terminate = _given(stack, terminate_record(instance, at=datetime.now(UTC)))
    assert eip_fn.handler(work_event(terminate), LambdaContext()).get("batchItemFailures", []) == []
    assert addresses(**{f"tag:{OWNER_TAG}": OWNER}) == []
    (kept,) = ec2.describe_addresses()["Addresses"]
    assert (kept["AllocationId"], kept.get("NetworkInterfaceId")) == (operators, second)


def test_an_operators_address_on_a_secondary_private_ip_of_the_instance_neither_stops_nor_loses_to_the_launch(
    eip_fn: ModuleType, stack: Stack
) -> None:
    # Given a launching instance whose primary interface has a secondary private IP (as the VPC CNI gives a node's
    # interfaces for pods) holding an operator's address, associated with that IP
    ec2: Any = boto3.client("ec2")
    (instance,) = run_instances(1)
    (described,) = ec2.describe_instances(InstanceIds=[instance])["Reservations"][0]["Instances"]
    (interface,) = [n["NetworkInterfaceId"] for n in described["NetworkInterfaces"]]
    ec2.assign_private_ip_addresses(NetworkInterfaceId=interface, SecondaryPrivateIpAddressCount=1)
    (ips,) = ec2.describe_network_interfaces(NetworkInterfaceIds=[interface])["NetworkInterfaces"]
    (secondary,) = [ip["PrivateIpAddress"] for ip in ips["PrivateIpAddresses"] if not ip["Primary"]]
    theirs = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.associate_address(AllocationId=theirs, NetworkInterfaceId=interface, PrivateIpAddress=secondary)
    launch = _given(stack, launch_record(instance, at=datetime.now(UTC)))

    # When the eip function gets the launch's work message
    response = eip_fn.handler(work_event(launch), LambdaContext())

    # Then the instance takes its own address on its primary private IP, which that address was not in the way of
    # (an association moves off only the address of the private IP it goes to), and the operator's stays
    assert response.get("batchItemFailures", []) == []
    (address,) = addresses(**{f"tag:{OWNER_TAG}": OWNER})
    assert (address.get("InstanceId"), address["PrivateIpAddress"]) == (
        instance,
        described["PrivateIpAddress"],
    )
    launched = _current(stack, launch)
    assert (launched.step, launched.allocation_id) == (Step.READY_GATE, address["AllocationId"])
    (kept,) = ec2.describe_addresses(AllocationIds=[theirs])["Addresses"]
    assert (kept.get("InstanceId"), kept["PrivateIpAddress"]) == (instance, secondary)

    # When the instance terminates (drained) and the eip function gets the RELEASE_EIP message
    terminate = _given(stack, terminate_record(instance, at=datetime.now(UTC)))
    assert eip_fn.handler(work_event(terminate), LambdaContext()).get("batchItemFailures", []) == []

    # Then the stack's address is released and the operator's is where it was
    assert addresses(**{f"tag:{OWNER_TAG}": OWNER}) == []
    (kept,) = ec2.describe_addresses(AllocationIds=[theirs])["Addresses"]
    assert (kept.get("InstanceId"), kept["PrivateIpAddress"]) == (instance, secondary)
