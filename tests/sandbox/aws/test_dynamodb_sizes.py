"""DynamoDB's item size, counted as DynamoDB counts it: a list or a map takes 3 bytes, and each of its elements 1
byte, on top of what it holds ("DynamoDB item sizes and formats"), where moto counted what it holds alone; so an
item of many small elements that DynamoDB refuses as over its size limit was taken in the sandbox."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from moto.dynamodb.models.dynamo_type import DynamoType

from nodecycle_sandbox.aws import dynamodb_sizes
from tests.sandbox.aws.conftest import RECORDS_TABLE as TABLE

TEXT = "x" * 390_000  # bytes of one string attribute: under moto's limit (405,000) by 15,000
# nothing to moto; 4 bytes to DynamoDB (its 3, and 1 as an element of a list)
EMPTY_MAP: dict[str, Any] = {"M": {}}


@pytest.fixture
def dynamodb(records_table: Any) -> Any:
    """The conftest's table, moto patched as the sandbox patches it (a class's methods: for every server)."""
    dynamodb_sizes.install()
    return records_table


def test_lists_and_maps_count_their_overhead() -> None:
    dynamodb_sizes.install()
    assert DynamoType({"L": []}).size() == 3
    assert DynamoType({"M": {}}).size() == 3
    assert DynamoType({"L": [{"S": "ab"}, {"N": "7"}]}).size() == 3 + (2 + 1) + (1 + 1)
    # a map of one map: the inner one's overhead and its element's, then the outer's
    assert DynamoType({"M": {"k": {"M": {"a": {"S": "x"}}}}}).size() == 3 + 1 + len("k") + (
        3 + 1 + len("a") + 1
    )


def test_an_item_over_the_limit_only_by_its_lists_overhead_is_refused(dynamodb: Any) -> None:
    # Given an item of 390,000 bytes of text and a list of 5,000 empty maps (20,003 bytes to DynamoDB)
    many = {"id": {"S": "line"}, "log": {"S": TEXT}, "waiters": {"L": [EMPTY_MAP] * 5_000}}

    # When it is written, Then it is refused as DynamoDB refuses it, and nothing is written
    with pytest.raises(ClientError) as refused:
        dynamodb.put_item(TableName=TABLE, Item=many)
    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "Item size has exceeded the maximum allowed size" in refused.value.response["Error"]["Message"]
    assert "Item" not in dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "line"}}, ConsistentRead=True)


def test_an_item_under_the_limit_with_its_overhead_is_taken(dynamodb: Any) -> None:
    # 2,000 empty maps: 8,003 bytes with their overhead, the item under the limit
    item = {"id": {"S": "line"}, "log": {"S": TEXT}, "waiters": {"L": [EMPTY_MAP] * 2_000}}
    dynamodb.put_item(TableName=TABLE, Item=item)
    read = dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "line"}}, ConsistentRead=True)["Item"]
    assert len(read["waiters"]["L"]) == 2_000
