"""DynamoDB's numbers as the sandbox keeps them: as DynamoDB does, leading and trailing zeroes trimmed ("Supported
data types", Number, DynamoDB developer guide), where moto gave back the string it was sent."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import dynamodb_numbers
from tests.sandbox.aws.conftest import RECORDS_TABLE as TABLE


@pytest.fixture
def dynamodb(records_table: Any) -> Any:
    """The conftest's table, moto patched as the sandbox patches it (a class's methods: for every backend)."""
    dynamodb_numbers.install()
    return records_table


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        ("1.50", "1.5"),
        ("007", "7"),
        ("2.0", "2"),
        ("-0.0", "0"),
        ("0", "0"),
        ("1E+2", "100"),
        ("1e-5", "0.00001"),
        ("-12.3400", "-12.34"),
        ("12345678901234567890123456789012345678", "12345678901234567890123456789012345678"),  # 38 digits
        ("1764777600.25", "1764777600.25"),
    ],
)
def test_a_number_is_read_back_in_dynamodbs_form(sent: str, kept: str) -> None:
    assert dynamodb_numbers.canonical(sent) == kept


def test_an_items_numbers_are_read_back_trimmed_in_maps_lists_and_sets(dynamodb: Any) -> None:
    # Given an item written with numbers in forms DynamoDB does not keep
    dynamodb.put_item(
        TableName=TABLE,
        Item={
            "id": {"S": "a"},
            "n": {"N": "30.0"},
            "m": {"M": {"at": {"N": "0010.500"}, "l": {"L": [{"N": "2.00"}, {"S": "2.00"}]}}},
            "ns": {"NS": ["1.10", "3"]},
        },
    )

    # When it is read
    item = dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "a"}}, ConsistentRead=True)["Item"]

    # Then its numbers are DynamoDB's, its strings as they were
    assert item["n"] == {"N": "30"}
    assert item["m"]["M"]["at"] == {"N": "10.5"}
    assert item["m"]["M"]["l"]["L"] == [{"N": "2"}, {"S": "2.00"}]
    assert sorted(item["ns"]["NS"]) == ["1.1", "3"]


def test_the_item_a_failed_condition_returns_is_in_dynamodbs_form(dynamodb: Any) -> None:
    # Given an item written with a number as "2.0" (a float's str)
    written = {"id": {"S": "a"}, "version": {"N": "2.0"}}
    dynamodb.put_item(TableName=TABLE, Item=written)

    # When the same write is sent again on condition that the item is not there (botocore's retry of a write whose
    # answer was lost), asking for the item that failed the condition
    with pytest.raises(ClientError) as refused:
        dynamodb.put_item(
            TableName=TABLE,
            Item=written,
            ConditionExpression="attribute_not_exists(id)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )

    # Then the item it returns is not the one sent, number for number: DynamoDB kept the number, not its string
    assert refused.value.response["Item"] == {"id": {"S": "a"}, "version": {"N": "2"}}  # type: ignore[typeddict-item]
    assert refused.value.response["Item"] != written  # type: ignore[typeddict-item]


def test_conditions_compare_numbers_whatever_their_form(dynamodb: Any) -> None:
    # Given an item whose version was written as "3.0"
    dynamodb.put_item(TableName=TABLE, Item={"id": {"S": "a"}, "version": {"N": "3.0"}})

    # When it is written over on condition of its version, given as "3"
    dynamodb.put_item(
        TableName=TABLE,
        Item={"id": {"S": "a"}, "version": {"N": "4"}},
        ConditionExpression="version = :expected",
        ExpressionAttributeValues={":expected": {"N": "3"}},
    )

    # Then the condition held (the same number), as on DynamoDB
    item = dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "a"}}, ConsistentRead=True)["Item"]
    assert item["version"] == {"N": "4"}


def test_a_cancelled_transactions_reasons_carry_the_item_in_dynamodbs_form(dynamodb: Any) -> None:
    # Given an item written with a number as "1.50"
    dynamodb.put_item(TableName=TABLE, Item={"id": {"S": "a"}, "share": {"N": "1.50"}})

    # When a transaction's write of it fails its condition, asking for the item
    with pytest.raises(ClientError) as cancelled:
        dynamodb.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": TABLE,
                        "Item": {"id": {"S": "a"}, "share": {"N": "1.50"}},
                        "ConditionExpression": "attribute_not_exists(id)",
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                }
            ]
        )

    # Then its cancellation reason carries the item as DynamoDB keeps it
    reasons = cancelled.value.response["CancellationReasons"]
    assert reasons[0]["Code"] == "ConditionalCheckFailed"
    assert reasons[0]["Item"] == {"id": {"S": "a"}, "share": {"N": "1.5"}}
