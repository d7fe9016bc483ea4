"""DynamoDB's Time to Live in the sandbox: an expired item stays readable (and met by a conditional write) until
the table's TTL deletes it, which moto never did and a test now says when (``AwsControl.expire_ttl``), as DynamoDB
does some time after the expiry: only by a top-level Number at or before that time, only in a table whose TTL is
enabled, and from its indexes as any deletion."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from nodecycle_sandbox.aws import AwsControl
from tests.sandbox.aws.conftest import RECORDS_TABLE as TABLE
from tests.sandbox.aws.conftest import REGION

NOW = 1_800_000_000.0


@pytest.fixture
def dynamodb(records_table: Any) -> Any:
    records_table.update_time_to_live(
        TableName=TABLE, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"}
    )
    return records_table


def _ids(client: Any, table: str = TABLE) -> list[str]:
    return sorted(item["id"]["S"] for item in client.scan(TableName=table)["Items"])


def test_expired_items_stay_until_the_ttl_deletes_them_then_only_they_go(dynamodb: Any) -> None:
    # Given items expired an hour ago, just now, not yet, with a TTL attribute that is no number, and none
    for item_id, expires in (("hour-ago", NOW - 3600), ("now", NOW), ("later", NOW + 1)):
        dynamodb.put_item(
            TableName=TABLE, Item={"id": {"S": item_id}, "expires_at": {"N": str(int(expires))}}
        )
    dynamodb.put_item(TableName=TABLE, Item={"id": {"S": "text"}, "expires_at": {"S": str(int(NOW - 3600))}})
    dynamodb.put_item(TableName=TABLE, Item={"id": {"S": "kept"}})

    # Then, until the TTL deletes them, the expired ones are read, listed, and met by a conditional write
    assert "Item" in dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "hour-ago"}}, ConsistentRead=True)
    with pytest.raises(ClientError) as met:
        dynamodb.put_item(
            TableName=TABLE, Item={"id": {"S": "hour-ago"}}, ConditionExpression="attribute_not_exists(id)"
        )
    assert met.value.response["Error"]["Code"] == "ConditionalCheckFailedException"

    # When the table's TTL runs at NOW
    deleted = AwsControl(region=REGION).expire_ttl(at=NOW)

    # Then exactly the items expired by then are gone
    assert sorted(deleted) == [f"{TABLE}/hour-ago", f"{TABLE}/now"]
    assert _ids(dynamodb) == ["kept", "later", "text"]


def test_a_table_whose_ttl_is_not_enabled_keeps_its_items(records_table: Any) -> None:
    records_table.put_item(TableName=TABLE, Item={"id": {"S": "old"}, "expires_at": {"N": "1"}})
    assert AwsControl(region=REGION).expire_ttl(at=NOW) == []
    assert _ids(records_table) == ["old"]


def test_a_ttl_deletion_leaves_a_global_secondary_index_too(dynamodb: Any) -> None:
    # Given a table whose sparse index lists an expired item
    client = boto3.client("dynamodb", region_name=REGION)
    client.create_table(
        TableName="indexed",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "open_owner", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "open-by-owner",
                "KeySchema": [{"AttributeName": "open_owner", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    client.update_time_to_live(
        TableName="indexed", TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"}
    )
    client.put_item(
        TableName="indexed",
        Item={"id": {"S": "a"}, "open_owner": {"S": "stack-a"}, "expires_at": {"N": str(int(NOW - 1))}},
    )

    # When the TTL deletes it, Then the index no longer lists it
    assert AwsControl(region=REGION).expire_ttl(at=NOW) == ["indexed/a"]
    listed = client.query(
        TableName="indexed",
        IndexName="open-by-owner",
        KeyConditionExpression="open_owner = :o",
        ExpressionAttributeValues={":o": {"S": "stack-a"}},
    )["Items"]
    assert listed == []
