"""CreateTags naming an Elastic IP that EC2 does not have, as EC2 answers it: refused (the whole request),
``InvalidAllocationID.NotFound``, and nothing tagged. moto tagged any id, so DescribeTags listed tags of an address
released before, and a tool that tags an address after allocating it (an operator adding one to a pool) never
learnt that the address it tagged was gone."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import ec2_addresses, ec2_tags

POOL = [{"Key": "nodecycle:pool", "Value": "blue"}]


@pytest.fixture
def ec2() -> Iterator[Any]:
    ec2_addresses.install()
    ec2_tags.install()
    with mock_aws():
        yield boto3.client("ec2", region_name="eu-west-1")


def _tags_of(ec2: Any, resource: str) -> list[dict[str, str]]:
    found: list[dict[str, str]] = ec2.describe_tags(Filters=[{"Name": "resource-id", "Values": [resource]}])[
        "Tags"
    ]
    return found


def test_a_released_address_is_not_tagged_again(ec2: Any) -> None:
    # Given an address allocated without tags, released before the tool that allocated it tags it
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]
    ec2.release_address(AllocationId=allocation)

    # When it is tagged, Then EC2 says it does not have it, and no tag of it is listed
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.create_tags(Resources=[allocation], Tags=POOL)
    assert refused.value.response["Error"]["Code"] == "InvalidAllocationID.NotFound"
    assert _tags_of(ec2, allocation) == []


def test_a_request_naming_one_unknown_address_tags_none_of_them(ec2: Any) -> None:
    # Given an address EC2 has and an allocation id it never had
    kept = ec2.allocate_address(Domain="vpc")["AllocationId"]
    never = "eipalloc-0123456789abcdef0"

    # When both are tagged in one request, Then the request is refused as a whole
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.create_tags(Resources=[kept, never], Tags=POOL)
    assert refused.value.response["Error"]["Code"] == "InvalidAllocationID.NotFound"
    assert _tags_of(ec2, kept) == []
    assert _tags_of(ec2, never) == []


def test_an_address_ec2_has_is_tagged_after_its_allocation(ec2: Any) -> None:
    allocation = ec2.allocate_address(Domain="vpc")["AllocationId"]

    ec2.create_tags(Resources=[allocation], Tags=POOL)

    found = ec2.describe_addresses(Filters=[{"Name": "tag:nodecycle:pool", "Values": ["blue"]}])["Addresses"]
    assert [a["AllocationId"] for a in found] == [allocation]
