"""The template refuses a pool name EC2 could not look the pool up by: the claim finds the pool's addresses with a
``tag:nodecycle:pool`` filter, whose value EC2 takes up to 255 characters (FilterLimitExceeded past it, as the
sandbox's EC2 answers). Taken by the template, such a name would deploy a stack whose functions all refuse to
start (their settings hold the name to 255 characters), every launch of the fleet failing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import ec2_filters
from nodecycle_sandbox.runner.cfn_yaml import load_template
from nodecycle_sandbox.runner.intrinsics import ParameterError, check_parameters

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = load_template(ROOT / "template.yaml")


def test_a_pool_name_longer_than_an_ec2_filter_value_is_refused_by_the_template() -> None:
    # Given a pool name of 256 characters, When the stack is deployed with it, Then the template refuses it
    with pytest.raises(ParameterError, match="EipPoolName"):
        check_parameters(TEMPLATE, {"EipMode": "pool", "EipPoolName": "p" * 256})


def test_the_longest_pool_name_the_template_takes_is_one_ec2_looks_up() -> None:
    # Given the longest pool name the template takes
    longest = "p" * int(TEMPLATE["Parameters"]["EipPoolName"]["MaxLength"])
    check_parameters(TEMPLATE, {"EipMode": "pool", "EipPoolName": longest})

    # When the pool's addresses are looked up by it on the sandbox's EC2 (which refuses as EC2 does), Then it
    # answers
    ec2_filters.install()
    with mock_aws():
        ec2: Any = boto3.client("ec2", region_name="eu-west-1")
        assert (
            ec2.describe_addresses(Filters=[{"Name": "tag:nodecycle:pool", "Values": [longest]}])["Addresses"]
            == []
        )
