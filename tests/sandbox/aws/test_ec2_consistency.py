"""EC2 that lags (aws/ec2_consistency.py): a lagging caller's reads see the state of ``seconds`` ago, and its calls
naming an id EC2 did not have then answer that id's NotFound code; other callers see the latest state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.core import DEFAULT_ACCOUNT_ID as ACCOUNT_ID
from moto.ec2.models import ec2_backends

from nodecycle_sandbox.aws import ec2_consistency
from nodecycle_sandbox.aws.ec2_consistency import LAG
from nodecycle_sandbox.aws.group import SANDBOX_AMI
from nodecycle_sandbox.aws.install import install

REGION = "eu-west-1"
LAGGING = "AKIAFUNCTIONLAGGING0"  # a function's key: its reads lag
OPERATOR = "AKIATESTOPERATOR0000"  # the test's: it sees the latest state
WINDOW = 2.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _client(key: str) -> Any:
    return boto3.client("ec2", region_name=REGION, aws_access_key_id=key, aws_secret_access_key="testing")


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


@pytest.fixture
def fn() -> Any:
    return _client(LAGGING)


@pytest.fixture
def operator() -> Any:
    return _client(OPERATOR)


def code(call: Any, **kwargs: Any) -> str:
    with pytest.raises(ClientError) as raised:
        call(**kwargs)
    return str(raised.value.response["Error"]["Code"])


def instance(ec2: Any) -> str:
    return str(ec2.run_instances(ImageId=SANDBOX_AMI, MinCount=1, MaxCount=1)["Instances"][0]["InstanceId"])


def listed(ec2: Any, **filters: str) -> dict[str, dict[str, Any]]:
    found = ec2.describe_addresses(Filters=[{"Name": k, "Values": [v]} for k, v in filters.items()])
    return {address["AllocationId"]: address for address in found["Addresses"]}


def tags(address: dict[str, Any]) -> dict[str, str]:
    return {tag["Key"]: tag["Value"] for tag in address.get("Tags", [])}


def test_an_address_just_allocated_is_unknown_to_a_lagging_caller_until_the_window_is_over(
    clock: Clock, fn: Any, operator: Any
) -> None:
    # Given an instance launched before the window, and an address the function has just allocated
    clock.now -= 10
    server = instance(operator)
    clock.now += 10
    spec = [{"ResourceType": "elastic-ip", "Tags": [{"Key": "owner", "Value": "a"}]}]
    new = fn.allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"]

    # When the function names it, or lists the addresses, within the window
    # Then EC2 does not know it: each call answers InvalidAllocationID.NotFound, the listings leave it out
    assert code(fn.associate_address, AllocationId=new, InstanceId=server) == "InvalidAllocationID.NotFound"
    assert code(fn.describe_addresses, AllocationIds=[new]) == "InvalidAllocationID.NotFound"
    assert code(fn.release_address, AllocationId=new) == "InvalidAllocationID.NotFound"
    tag = [{"Key": "k", "Value": "v"}]
    assert code(fn.create_tags, Resources=[new], Tags=tag) == "InvalidAllocationID.NotFound"
    assert listed(fn) == {}
    assert listed(fn, **{"tag:owner": "a"}) == {}
    # And the refused calls changed nothing, and the test (another caller) sees it as it is
    assert listed(operator)[new].get("InstanceId") is None
    assert tags(listed(operator)[new]) == {"owner": "a"}
    # And once the window is over, the function sees it, and associates it
    clock.now += WINDOW + 0.1
    assert list(listed(fn, **{"tag:owner": "a"})) == [new]
    fn.associate_address(AllocationId=new, InstanceId=server, AllowReassociation=False)
    assert listed(operator)[new]["InstanceId"] == server
    assert "associate_address " + new in LAG.lagged


def test_reads_within_the_window_show_an_address_as_it_was_before_each_write(
    clock: Clock, fn: Any, operator: Any
) -> None:
    # Given an address and two instances, known for long
    clock.now -= 10
    first, second = instance(operator), instance(operator)
    address = operator.allocate_address(Domain="vpc")["AllocationId"]
    clock.now += 10

    # When the function associates it: its reads within the window still show it free
    association = fn.associate_address(AllocationId=address, InstanceId=first, AllowReassociation=False)[
        "AssociationId"
    ]
    assert "InstanceId" not in listed(fn)[address]
    assert listed(fn, **{"instance-id": first}) == {}
    assert listed(operator)[address]["InstanceId"] == first
    # And EC2 decides on its own state: the address shown free is refused to another instance, not moved
    refused = code(fn.associate_address, AllocationId=address, InstanceId=second, AllowReassociation=False)
    assert refused == "Resource.AlreadyAssociated"
    # And the association just made is unknown to a disassociation within the window
    assert code(fn.disassociate_address, AssociationId=association) == "InvalidAssociationID.NotFound"

    # When the window is over, the association shows; and after the function disassociates it, it still shows
    clock.now += WINDOW + 0.1
    assert listed(fn, **{"instance-id": first})[address]["AssociationId"] == association
    fn.disassociate_address(AssociationId=association)
    assert listed(fn)[address]["InstanceId"] == first
    assert "InstanceId" not in listed(operator)[address]

    # When it is released: it is still listed to the function within the window, as it was before
    clock.now += WINDOW + 0.1
    fn.release_address(AllocationId=address)
    assert "InstanceId" not in listed(fn)[address]
    assert fn.describe_addresses(AllocationIds=[address])["Addresses"][0]["AllocationId"] == address
    assert listed(operator) == {}
    clock.now += WINDOW + 0.1
    assert listed(fn) == {}


def test_a_tag_filter_misses_an_address_just_tagged_within_the_window(clock: Clock, fn: Any) -> None:
    # Given an address allocated long ago
    clock.now -= 10
    address = fn.allocate_address(Domain="vpc")["AllocationId"]
    clock.now += 10

    # When it is tagged
    fn.create_tags(Resources=[address], Tags=[{"Key": "nodecycle:pool", "Value": "ci"}])

    # Then a tag filter misses it within the window, and finds it once it is over
    assert listed(fn, **{"tag:nodecycle:pool": "ci"}) == {}
    assert tags(listed(fn)[address]) == {}
    clock.now += WINDOW + 0.1
    assert list(listed(fn, **{"tag:nodecycle:pool": "ci"})) == [address]


def test_an_instance_just_launched_is_unknown_to_a_lagging_caller_until_the_window_is_over(
    clock: Clock, fn: Any, operator: Any
) -> None:
    # Given an instance just launched (by anyone: Auto Scaling launches through the backend), and an address
    server = instance(operator)
    clock.now -= 10
    address = operator.allocate_address(Domain="vpc")["AllocationId"]
    clock.now += 10

    # Then the function's calls do not know it within the window
    by_id = [{"Name": "instance-id", "Values": [server]}]
    assert fn.describe_instances(Filters=by_id)["Reservations"] == []
    assert code(fn.describe_instances, InstanceIds=[server]) == "InvalidInstanceID.NotFound"
    status = code(fn.describe_instance_status, InstanceIds=[server], IncludeAllInstances=True)
    assert status == "InvalidInstanceID.NotFound"
    assert code(fn.associate_address, AllocationId=address, InstanceId=server) == "InvalidInstanceID.NotFound"
    assert len(operator.describe_instances(Filters=by_id)["Reservations"]) == 1
    # And once the window is over, they do
    clock.now += WINDOW + 0.1
    (reservation,) = fn.describe_instances(Filters=by_id)["Reservations"]
    assert [i["InstanceId"] for i in reservation["Instances"]] == [server]
    fn.associate_address(AllocationId=address, InstanceId=server, AllowReassociation=False)


def test_the_lag_is_off_once_disarmed_and_the_views_are_as_moto_answers(
    clock: Clock, fn: Any, operator: Any
) -> None:
    # Given an associated, tagged address
    server = instance(operator)
    spec = [{"ResourceType": "elastic-ip", "Tags": [{"Key": "owner", "Value": "a"}]}]
    address = operator.allocate_address(Domain="vpc", TagSpecifications=spec)["AllocationId"]
    operator.associate_address(AllocationId=address, InstanceId=server)

    # Then its view (what a lagging read answers) is what moto answers
    answered = operator.describe_addresses()["Addresses"]
    viewed = list(ec2_consistency.views(ec2_backends[ACCOUNT_ID][REGION]).values())
    assert [{k: v for k, v in a.items() if k != "ResponseMetadata"} for a in answered] == viewed
    # And disarmed, the function sees what was just written
    LAG.disarm()
    assert listed(fn)[address]["InstanceId"] == server
    assert len(fn.describe_instances(InstanceIds=[server])["Reservations"]) == 1
