"""Contract tests: each case runs against a unit tests' fake and against the real adapter (moto in process,
with the sandbox's AWS-like answers where the port needs them; the sandbox's in-memory API server), so that
a fake is never kinder than what it stands for."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from nodecycle_sandbox.aws import dynamodb_expressions, dynamodb_sizes
from nodecycle_sandbox.runner.cfn_yaml import load_template
from tests.support.stack import TEMPLATE

REGION = "eu-west-1"  # tests/conftest.py's
LIFECYCLE_TABLE = load_template(TEMPLATE)["Resources"]["LifecycleTable"]["Properties"]


@pytest.fixture(scope="module")
def moto() -> Iterator[None]:
    """moto for a whole module (a reset per test costs more than the test): each test makes its own table
    or queue under a name of its own. DynamoDB refuses a request whose expression placeholders it does not all
    use, and counts the overhead of an item's lists and maps against its size limit, where moto does neither:
    checked and counted as DynamoDB does (patches of moto's classes, for the whole process)."""
    dynamodb_expressions.install()
    dynamodb_sizes.install()
    with mock_aws():
        yield


def aws(service: str) -> Any:
    return boto3.client(  # type: ignore[call-overload]
        service, region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing"
    )


@pytest.fixture
def lifecycle_table(moto: None) -> str:
    """A lifecycle table as template.yaml declares it (keys, the open-by-due index), new for the test."""
    name = f"lifecycle-{uuid.uuid4().hex[:8]}"
    aws("dynamodb").create_table(
        TableName=name,
        BillingMode=LIFECYCLE_TABLE["BillingMode"],
        AttributeDefinitions=LIFECYCLE_TABLE["AttributeDefinitions"],
        KeySchema=LIFECYCLE_TABLE["KeySchema"],
        GlobalSecondaryIndexes=LIFECYCLE_TABLE["GlobalSecondaryIndexes"],
    )
    return name
