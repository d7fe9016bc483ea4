"""moto's EC2 as the sandbox patches it: the filters of a Describe call are held to EC2's limits (200 values a
call, 255 characters a value), with EC2's FilterLimitExceeded."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import ec2_filters


@pytest.fixture
def ec2() -> Iterator[Any]:
    ec2_filters.install()
    with mock_aws():
        yield boto3.client("ec2", region_name="eu-west-1")


def ids(count: int) -> list[str]:
    return [f"i-{n:017x}" for n in range(count)]


def test_more_than_200_filter_values_in_a_call_are_refused(ec2: Any) -> None:
    # Given 201 values over two filters of one call (moto matched them)
    filters = [
        {"Name": "instance-id", "Values": ids(200)},
        {"Name": "instance-state-name", "Values": ["running"]},
    ]

    # When instances are described with them, Then EC2's refusal comes
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.describe_instances(Filters=filters)
    assert refused.value.response["Error"] == {
        "Code": "FilterLimitExceeded",
        "Message": "The maximum number of filter values specified on a single call is 200",
    }

    # and 200 values are taken
    ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": ids(200)}])


def test_a_filter_value_longer_than_255_characters_is_refused(ec2: Any) -> None:
    # When addresses are described by a tag value of 256 characters, Then EC2's refusal comes
    with pytest.raises(ec2.exceptions.ClientError) as refused:
        ec2.describe_addresses(Filters=[{"Name": "tag:nodecycle:pool", "Values": ["p" * 256]}])
    assert refused.value.response["Error"] == {
        "Code": "FilterLimitExceeded",
        "Message": "The maximum length for a filter value is 255 characters",
    }

    # and one of 255 is taken
    assert (
        ec2.describe_addresses(Filters=[{"Name": "tag:nodecycle:pool", "Values": ["p" * 255]}])["Addresses"]
        == []
    )
