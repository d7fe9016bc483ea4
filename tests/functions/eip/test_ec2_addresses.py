"""The EC2 adapter of the EIP steps: the exact requests (botocore Stubber), and EC2's error codes turned into
the domain's answers. moto does not answer AddressLimitExceeded, InvalidIPAddress.InUse or InvalidInstanceID
as AWS does, so those answers are stubbed here, as AWS documents them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.stub import Stubber

from nodecycle.adapters.aws.addresses import Ec2Addresses
from nodecycle.domain.errors import TransientError
from nodecycle.domain.ports.addresses import (
    Address,
    AddressAlreadyAssociated,
    AddressInUse,
    AddressLimitExceeded,
    AddressNotFound,
    AddressRefused,
    InstanceRefused,
    InstanceUnavailable,
)
from tests.functions.eip.conftest import api_calls, run_instances
from tests.support.stack import Stack

ALLOCATION = "eipalloc-0123456789abcdef0"
INSTANCE = "i-0fedcba9876543210"


@pytest.fixture
def stubbed() -> Iterator[tuple[Ec2Addresses, Stubber]]:
    # One attempt per call: botocore's own retries would consume the stubbed answers.
    ec2 = boto3.client("ec2", config=Config(retries={"total_max_attempts": 1}))
    with Stubber(ec2) as stubber:
        yield Ec2Addresses(ec2), stubber
        stubber.assert_no_pending_responses()


def test_an_association_never_moves_an_address_from_where_it_is(
    stubbed: tuple[Ec2Addresses, Stubber],
) -> None:
    adapter, stubber = stubbed
    stubber.add_response(
        "associate_address",
        {"AssociationId": "eipassoc-1"},
        expected_params={"AllocationId": ALLOCATION, "InstanceId": INSTANCE, "AllowReassociation": False},
    )

    assert adapter.associate(ALLOCATION, INSTANCE) == "eipassoc-1"


def test_the_addresses_an_association_would_displace_are_those_on_the_primary_private_ip(
    stubbed: tuple[Ec2Addresses, Stubber],
) -> None:
    # Given an instance with an operator's address on its primary private IP, and another on the interface
    # its bootstrap attached (EC2 lists both for the instance, each with its interface and private IP)
    adapter, stubber = stubbed

    def listed(allocation: str, interface: str, private_ip: str) -> dict[str, str]:
        return {
            "AllocationId": allocation,
            "PublicIp": "203.0.113.7",
            "AssociationId": f"eipassoc-{allocation[-1]}",
            "InstanceId": INSTANCE,
            "NetworkInterfaceId": interface,
            "PrivateIpAddress": private_ip,
        }

    stubber.add_response(
        "describe_addresses",
        {
            "Addresses": [
                listed("eipalloc-1", "eni-primary", "10.0.1.10"),
                listed("eipalloc-2", "eni-bootstrap", "10.0.2.20"),
            ]
        },
        expected_params={"Filters": [{"Name": "instance-id", "Values": [INSTANCE]}]},
    )
    stubber.add_response(
        "describe_instances",
        {"Reservations": [{"Instances": [{"InstanceId": INSTANCE, "PrivateIpAddress": "10.0.1.10"}]}]},
        expected_params={"Filters": [{"Name": "instance-id", "Values": [INSTANCE]}]},
    )
    # and an instance without any (a launch, nearly always): one call
    stubber.add_response("describe_addresses", {"Addresses": []})

    # Then only the address on the primary private IP is in the way of an association
    assert [a.allocation_id for a in adapter.on_primary_ip(INSTANCE)] == ["eipalloc-1"]
    assert adapter.on_primary_ip("i-0000000000000aaaa") == []


def test_an_allocation_carries_its_tags_from_creation(stubbed: tuple[Ec2Addresses, Stubber]) -> None:
    adapter, stubber = stubbed
    tags = {"nodecycle:owner": "stack-a", "nodecycle:instance-id": INSTANCE}
    stubber.add_response(
        "allocate_address",
        {"AllocationId": ALLOCATION, "PublicIp": "203.0.113.7", "Domain": "vpc"},
        expected_params={
            "Domain": "vpc",
            "TagSpecifications": [
                {
                    "ResourceType": "elastic-ip",
                    "Tags": [
                        {"Key": "nodecycle:owner", "Value": "stack-a"},
                        {"Key": "nodecycle:instance-id", "Value": INSTANCE},
                    ],
                }
            ],
        },
    )

    assert adapter.allocate(tags) == Address(allocation_id=ALLOCATION, public_ip="203.0.113.7", tags=tags)


def test_a_search_is_one_describe_addresses_filtered_by_owner_and_what_is_asked(
    stubbed: tuple[Ec2Addresses, Stubber],
) -> None:
    adapter, stubber = stubbed
    stubber.add_response(
        "describe_addresses",
        {
            "Addresses": [
                {
                    "AllocationId": ALLOCATION,
                    "PublicIp": "203.0.113.7",
                    "AssociationId": "eipassoc-1",
                    "InstanceId": INSTANCE,
                    "Tags": [
                        {"Key": "nodecycle:owner", "Value": "stack-a"},
                        {"Key": "nodecycle:pool", "Value": "ci"},
                    ],
                }
            ]
        },
        expected_params={
            "Filters": [
                {"Name": "tag:nodecycle:owner", "Values": ["stack-a"]},
                {"Name": "instance-id", "Values": [INSTANCE]},
                {"Name": "tag:nodecycle:pool", "Values": ["ci"]},
            ]
        },
    )

    (found,) = adapter.find("stack-a", instance_id=INSTANCE, pool="ci")

    assert found.association_id == "eipassoc-1"
    assert found.instance_id == INSTANCE
    assert found.pool == "ci"


ANSWERS: list[tuple[str, str, dict[str, Any], type[Exception]]] = [
    ("allocate_address", "AddressLimitExceeded", {}, AddressLimitExceeded),
    ("associate_address", "Resource.AlreadyAssociated", {}, AddressAlreadyAssociated),
    ("associate_address", "InvalidAllocationID.NotFound", {}, AddressNotFound),
    # ("associate_address", "InvalidInstanceID"): the adapter looks at the instance first, see
    # tests/functions/test_aws_adapters.py (several network interfaces, or not running)
    ("associate_address", "InvalidInstanceID.NotFound", {}, InstanceUnavailable),
    ("associate_address", "IncorrectInstanceState", {}, InstanceUnavailable),
    ("describe_addresses", "InvalidAllocationID.NotFound", {}, AddressNotFound),
    ("release_address", "InvalidIPAddress.InUse", {}, AddressInUse),
    ("allocate_address", "RequestLimitExceeded", {}, TransientError),
    ("associate_address", "InternalError", {"http_status_code": 500}, TransientError),
    # what botocore's standard mode retries and still fails: transient, never a refusal
    ("associate_address", "RequestTimeout", {}, TransientError),
    ("associate_address", "PriorRequestNotComplete", {}, TransientError),
    ("release_address", "EC2ThrottledException", {}, TransientError),
    # what no retry changes: a denial (IAM, a service control policy), a subnet without an internet gateway
    ("release_address", "UnauthorizedOperation", {"http_status_code": 403}, AddressRefused),
    ("disassociate_address", "AuthFailure", {"http_status_code": 401}, AddressRefused),
    ("describe_addresses", "UnauthorizedOperation", {"http_status_code": 403}, AddressRefused),
    ("describe_instances", "UnauthorizedOperation", {"http_status_code": 403}, AddressRefused),
    # (a VPC without an internet gateway: the instance's refusal, whatever the address)
    ("associate_address", "Gateway.NotAttached", {}, InstanceRefused),
    ("associate_address", "InvalidParameterCombination", {}, AddressRefused),
]


def call(adapter: Ec2Addresses, method: str) -> object:
    calls = {
        "allocate_address": lambda: adapter.allocate({"nodecycle:owner": "stack-a"}),
        "associate_address": lambda: adapter.associate(ALLOCATION, INSTANCE),
        "describe_addresses": lambda: adapter.describe(ALLOCATION),
        "release_address": lambda: adapter.release(ALLOCATION),
        "disassociate_address": lambda: adapter.disassociate("eipassoc-1"),
        "describe_instances": lambda: adapter.instance_states([INSTANCE]),
    }
    return calls[method]()


@pytest.mark.parametrize(("method", "code", "options", "expected"), ANSWERS)
def test_ec2_error_codes_become_the_domains_answers(
    stubbed: tuple[Ec2Addresses, Stubber],
    method: str,
    code: str,
    options: dict[str, Any],
    expected: type[Exception],
) -> None:
    adapter, stubber = stubbed
    stubber.add_client_error(method, service_error_code=code, **options)
    if code == "UnauthorizedOperation" and method in ("release_address", "disassociate_address"):
        # a denial of an address EC2 still has stands (one it no longer has is its NotFound, which IAM's tag
        # condition hides: see test_gone_address_refused.py)
        there = {"AllocationId": ALLOCATION, "PublicIp": "203.0.113.9"}
        stubber.add_response("describe_addresses", {"Addresses": [there]})

    with pytest.raises(expected):
        call(adapter, method)


@pytest.mark.parametrize(
    ("method", "code"),
    [
        ("release_address", "InvalidAllocationID.NotFound"),
        ("disassociate_address", "InvalidAssociationID.NotFound"),
    ],
)
def test_taking_back_what_is_gone_already_answers_false(
    stubbed: tuple[Ec2Addresses, Stubber], method: str, code: str
) -> None:
    adapter, stubber = stubbed
    stubber.add_client_error(method, service_error_code=code)

    assert call(adapter, method) is False


def several_interfaces(stubber: Stubber, interfaces: list[tuple[str, int, int]]) -> None:
    """EC2 refusing an association by the id of a running instance with several ``interfaces`` (id, device index,
    network card index), and then describing that instance."""
    stubber.add_client_error(
        "associate_address", "InvalidInstanceID", "There are multiple interfaces attached to instance."
    )
    running = {
        "InstanceId": INSTANCE,
        "State": {"Name": "running", "Code": 16},
        "NetworkInterfaces": [
            {"NetworkInterfaceId": eni, "Attachment": {"DeviceIndex": device, "NetworkCardIndex": card}}
            for eni, device, card in interfaces
        ],
    }
    stubber.add_response("describe_instances", {"Reservations": [{"Instances": [running]}]})


def test_the_primary_interface_of_an_instance_with_several_network_cards_is_device_0_of_card_0(
    stubbed: tuple[Ec2Addresses, Stubber],
) -> None:
    # Given an instance with several interfaces, one of them device 0 of network card 1, listed first
    adapter, stubber = stubbed
    several_interfaces(stubber, [("eni-card1", 0, 1), ("eni-primary", 0, 0)])
    # Then the address goes to the primary interface (the stub refuses any other parameters)
    stubber.add_response(
        "associate_address",
        {"AssociationId": "eipassoc-1"},
        {"AllocationId": ALLOCATION, "NetworkInterfaceId": "eni-primary", "AllowReassociation": False},
    )

    assert adapter.associate(ALLOCATION, INSTANCE) == "eipassoc-1"


def test_a_primary_interface_ec2_does_not_know_yet_is_an_instance_that_cannot_take_an_address_yet(
    stubbed: tuple[Ec2Addresses, Stubber],
) -> None:
    # Given an instance with several interfaces (EC2 refuses its id), whose primary interface AssociateAddress
    # does not know yet though DescribeInstances lists it (EC2 is eventually consistent: just attached)
    adapter, stubber = stubbed
    several_interfaces(stubber, [("eni-primary", 0, 0), ("eni-cni", 1, 0)])
    stubber.add_client_error(
        "associate_address",
        "InvalidNetworkInterfaceID.NotFound",
        "The networkInterface ID 'eni-primary' does not exist",
    )

    # Then the instance cannot take an address yet (the step asks for its state and tries again in seconds),
    # not a refusal (asked again minutes apart, counted as failures, then the failure policy)
    with pytest.raises(InstanceUnavailable):
        adapter.associate(ALLOCATION, INSTANCE)


def test_a_denied_lookup_of_the_instance_ec2_refused_an_address_is_a_refusal(
    stubbed: tuple[Ec2Addresses, Stubber],
) -> None:
    # Given EC2 refusing the instance id (several interfaces, or not running), then denying its description
    adapter, stubber = stubbed
    stubber.add_client_error("associate_address", "InvalidInstanceID", "not in a valid state")
    stubber.add_client_error("describe_instances", "UnauthorizedOperation", http_status_code=403)

    # Then the association is refused, as any denial is (the step's failure policy decides)
    with pytest.raises(AddressRefused):
        adapter.associate(ALLOCATION, INSTANCE)


def test_instance_states_take_one_describe_instances_per_200_ids_and_skip_the_unknown(stack: Stack) -> None:
    # Given two instances, one of them terminated, among 450 ids EC2 mostly does not know
    running, terminated = run_instances(2)
    ec2 = boto3.client("ec2")
    ec2.terminate_instances(InstanceIds=[terminated])
    unknown = [f"i-{number:017x}" for number in range(448)]
    calls = api_calls(ec2)

    # When the adapter asks for their states
    states = Ec2Addresses(ec2).instance_states([running, terminated, *unknown])

    # Then three calls answered for all of them (a filter, not InstanceIds: unknown ids do not fail a batch)
    assert calls["DescribeInstances"] == 3
    assert states == {running: "running", terminated: "terminated"}
