"""DynamoDB's requests refused, as DynamoDB refuses them, when they define an expression placeholder (a value or
a name) that none of their expressions uses, or define one without any expression: moto took them (a PutItem, a
Scan, a transaction's Put), and a writer whose condition no longer names one of its values passed in the sandbox
and failed at every try in AWS."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import dynamodb_expressions
from tests.sandbox.aws.conftest import RECORDS_TABLE as TABLE

X = {"S": "x"}


@pytest.fixture
def dynamodb(records_table: Any) -> Any:
    """The conftest's table, moto patched as the sandbox patches it (a class's methods: for every server)."""
    dynamodb_expressions.install()
    return records_table


def _refused(call: Any) -> str:
    with pytest.raises(ClientError) as refused:
        call()
    error = refused.value.response["Error"]
    assert error["Code"] == "ValidationException"
    return str(error["Message"])


def test_a_put_whose_condition_does_not_use_a_value_is_refused_and_writes_nothing(dynamodb: Any) -> None:
    message = _refused(
        lambda: dynamodb.put_item(
            TableName=TABLE,
            Item={"id": X},
            ConditionExpression="attribute_not_exists(id)",
            ExpressionAttributeValues={":expected": {"N": "3"}},
        )
    )
    assert message == "Value provided in ExpressionAttributeValues unused in expressions: keys: {:expected}"
    assert "Item" not in dynamodb.get_item(TableName=TABLE, Key={"id": X}, ConsistentRead=True)


def test_values_without_any_expression_are_refused(dynamodb: Any) -> None:
    message = _refused(
        lambda: dynamodb.put_item(TableName=TABLE, Item={"id": X}, ExpressionAttributeValues={":v": X})
    )
    assert message == "ExpressionAttributeValues can only be specified when using expressions"


def test_a_transaction_with_an_unused_value_in_one_item_is_refused_whole(dynamodb: Any) -> None:
    used = {
        "Put": {
            "TableName": TABLE,
            "Item": {"id": {"S": "a"}},
            "ConditionExpression": "attribute_not_exists(id)",
        }
    }
    unused = {
        "Put": {
            "TableName": TABLE,
            "Item": {"id": {"S": "b"}},
            "ConditionExpression": "attribute_not_exists(id) OR lifecycle = :lifecycle",
            "ExpressionAttributeValues": {":lifecycle": X, ":displaced": X},
        }
    }
    message = _refused(lambda: dynamodb.transact_write_items(TransactItems=[used, unused]))
    assert message == "Value provided in ExpressionAttributeValues unused in expressions: keys: {:displaced}"
    assert dynamodb.scan(TableName=TABLE)["Items"] == []


def test_a_scan_with_an_unused_value_or_name_is_refused(dynamodb: Any) -> None:
    assert "keys: {:other}" in _refused(
        lambda: dynamodb.scan(
            TableName=TABLE,
            FilterExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "owner"},
            ExpressionAttributeValues={":owner": X, ":other": X},
        )
    )
    assert "ExpressionAttributeNames unused in expressions: keys: {#step}" in _refused(
        lambda: dynamodb.scan(
            TableName=TABLE,
            FilterExpression="#owner = :owner",
            ExpressionAttributeNames={"#owner": "owner", "#step": "step"},
            ExpressionAttributeValues={":owner": X},
        )
    )


def test_requests_that_use_every_placeholder_they_define_are_served(dynamodb: Any) -> None:
    # A conditional put, its writes again over the version read, a transaction, a filtered scan, a keyed query
    dynamodb.put_item(
        TableName=TABLE, Item={"id": X, "seq": {"N": "1"}}, ConditionExpression="attribute_not_exists(id)"
    )
    dynamodb.put_item(
        TableName=TABLE,
        Item={"id": X, "seq": {"N": "2"}},
        ConditionExpression="seq = :expected",
        ExpressionAttributeValues={":expected": {"N": "1"}},
    )
    dynamodb.transact_write_items(
        TransactItems=[
            {
                "Put": {
                    "TableName": TABLE,
                    "Item": {"id": {"S": "t"}, "lifecycle": X},
                    "ConditionExpression": "attribute_not_exists(id) OR lifecycle = :lifecycle OR lifecycle = :d",
                    "ExpressionAttributeValues": {":lifecycle": X, ":d": X},
                }
            }
        ]
    )
    listed = dynamodb.scan(
        TableName=TABLE,
        FilterExpression="#seq = :seq",
        ExpressionAttributeNames={"#seq": "seq"},
        ExpressionAttributeValues={":seq": {"N": "2"}},
    )["Items"]
    assert [item["id"] for item in listed] == [X]
    keyed = dynamodb.query(
        TableName=TABLE, KeyConditionExpression="id = :id", ExpressionAttributeValues={":id": {"S": "t"}}
    )["Items"]
    assert [item["id"] for item in keyed] == [{"S": "t"}]


@pytest.mark.parametrize(
    ("request_", "refused"),
    [
        ({"ConditionExpression": "a = :a", "ExpressionAttributeValues": {":a": X}}, None),
        ({"ConditionExpression": "a = :a", "ExpressionAttributeValues": {":a": X, ":ab": X}}, "{:ab}"),
        ({"ConditionExpression": "a = :ab", "ExpressionAttributeValues": {":a": X, ":ab": X}}, "{:a}"),
        (
            {
                "UpdateExpression": "SET #a = :a",
                "ExpressionAttributeNames": {"#a": "a"},
                "ExpressionAttributeValues": {":a": X},
            },
            None,
        ),
        ({"ProjectionExpression": "#a, b", "ExpressionAttributeNames": {"#a": "a"}}, None),
        ({"ExpressionAttributeNames": {"#a": "a"}}, "can only be specified"),
    ],
)
def test_a_placeholder_counts_as_used_only_by_its_whole_name(
    request_: dict[str, Any], refused: str | None
) -> None:
    message = dynamodb_expressions.refusal(request_)
    assert (message is None) if refused is None else (message is not None and refused in message)
