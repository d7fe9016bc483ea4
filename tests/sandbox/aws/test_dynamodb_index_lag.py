"""The sandbox's DynamoDB global secondary indexes lagging their table, as DynamoDB's may: a Query of an index
misses an item just written, lists one whose index key was just removed, and carries an older version of an
item; so may an eventually consistent read of the table (GetItem, Query, Scan without ConsistentRead), while a
consistent read and a transaction's see the latest; armed as a fault or held by a test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from nodecycle_sandbox.aws import AwsControl, install
from nodecycle_sandbox.aws.dynamodb_index_lag import LAG
from nodecycle_sandbox.faults import Fault

TABLE, INDEX, REGION = "records", "open-by-owner", "eu-west-1"


@pytest.fixture
def dynamodb() -> Iterator[Any]:
    install()
    with mock_aws():
        client = boto3.client("dynamodb", region_name=REGION)
        client.create_table(
            TableName=TABLE,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": "id", "AttributeType": "S"},
                {"AttributeName": "open_owner", "AttributeType": "S"},
            ],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": INDEX,
                    "KeySchema": [{"AttributeName": "open_owner", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client
    LAG.disarm()


def _open(item_id: str, step: str) -> dict[str, Any]:
    return {"id": {"S": item_id}, "open_owner": {"S": "stack-a"}, "step": {"S": step}}


def _listed(client: Any) -> dict[str, str]:
    """The index's items: id -> step."""
    items = client.query(
        TableName=TABLE,
        IndexName=INDEX,
        KeyConditionExpression="open_owner = :o",
        ExpressionAttributeValues={":o": {"S": "stack-a"}},
    )["Items"]
    return {item["id"]["S"]: item["step"]["S"] for item in items}


def _step(client: Any, item_id: str) -> str | None:
    item = client.get_item(TableName=TABLE, Key={"id": {"S": item_id}}, ConsistentRead=True).get("Item")
    return None if item is None else str(item["step"]["S"])


def test_a_held_index_misses_new_items_lists_closed_ones_and_older_versions_until_it_catches_up(
    dynamodb: Any,
) -> None:
    # Given two open items the index has, one of which will close (its index key removed) and one move on
    dynamodb.put_item(TableName=TABLE, Item=_open("closing", "evict"))
    dynamodb.put_item(TableName=TABLE, Item=_open("moving", "evict"))
    assert _listed(dynamodb) == {"closing": "evict", "moving": "evict"}

    with LAG.held(TABLE):
        # When, while the index lags, a third is written, one closed and one moved on (PutItem, UpdateItem)
        dynamodb.put_item(TableName=TABLE, Item=_open("new", "acquire"))
        dynamodb.put_item(TableName=TABLE, Item={"id": {"S": "closing"}, "step": {"S": "done"}})
        dynamodb.update_item(
            TableName=TABLE,
            Key={"id": {"S": "moving"}},
            UpdateExpression="SET step = :s",
            ExpressionAttributeValues={":s": {"S": "complete"}},
        )

        # Then the index lists them as they were: the new one missing, the closed one open, the moved one at
        # its older step; the table's consistent reads see every write
        assert _listed(dynamodb) == {"closing": "evict", "moving": "evict"}
        assert [_step(dynamodb, i) for i in ("new", "closing", "moving")] == ["acquire", "done", "complete"]
        # (and the index refuses a consistent read, as DynamoDB does)
        with pytest.raises(ClientError, match="Consistent reads are not supported"):
            dynamodb.query(
                TableName=TABLE,
                IndexName=INDEX,
                KeyConditionExpression="open_owner = :o",
                ExpressionAttributeValues={":o": {"S": "stack-a"}},
                ConsistentRead=True,
            )

    # And once the lag is over, the index catches up
    assert _listed(dynamodb) == {"new": "acquire", "moving": "complete"}


def test_an_eventually_consistent_read_of_the_table_may_miss_a_write_a_consistent_one_sees(
    dynamodb: Any,
) -> None:
    # Given an item, moved on while the table's writes have not reached every copy (DynamoDB's eventually
    # consistent reads, the default of GetItem, Query and Scan, "might not reflect the results of a recently
    # completed write"; a strongly consistent read does)
    dynamodb.put_item(TableName=TABLE, Item=_open("moving", "evict"))
    with LAG.held(TABLE):
        dynamodb.put_item(TableName=TABLE, Item=_open("moving", "complete"))
        dynamodb.put_item(TableName=TABLE, Item=_open("new", "acquire"))

        # Then the reads without ConsistentRead see the item as it was (and not the new one), the consistent
        # ones every write; a transaction's read is isolated (serializable), never stale
        def steps(read: Any) -> dict[str, str]:
            return {item["id"]["S"]: item["step"]["S"] for item in read}

        eventual = dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "moving"}})["Item"]
        assert eventual["step"]["S"] == "evict"
        assert "Item" not in dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "new"}})
        assert steps(dynamodb.scan(TableName=TABLE)["Items"]) == {"moving": "evict"}
        table_query = {
            "TableName": TABLE,
            "KeyConditionExpression": "id = :i",
            "ExpressionAttributeValues": {":i": {"S": "moving"}},
        }
        assert steps(dynamodb.query(**table_query)["Items"]) == {"moving": "evict"}
        assert steps(dynamodb.query(**table_query, ConsistentRead=True)["Items"]) == {"moving": "complete"}
        assert steps(dynamodb.scan(TableName=TABLE, ConsistentRead=True)["Items"]) == {
            "moving": "complete",
            "new": "acquire",
        }
        assert [_step(dynamodb, i) for i in ("moving", "new")] == ["complete", "acquire"]
        (got,) = dynamodb.transact_get_items(
            TransactItems=[{"Get": {"TableName": TABLE, "Key": {"id": {"S": "moving"}}}}]
        )["Responses"]
        assert got["Item"]["step"]["S"] == "complete"

    # And once the copies catch up, every read sees the latest
    assert dynamodb.get_item(TableName=TABLE, Key={"id": {"S": "moving"}})["Item"]["step"]["S"] == "complete"


def test_a_batch_read_is_eventually_consistent_unless_it_asks_its_table_for_consistent_reads(
    dynamodb: Any,
) -> None:
    # Given an item, moved on while the table's writes have not reached every copy, and a new one
    dynamodb.put_item(TableName=TABLE, Item=_open("moving", "evict"))
    with LAG.held(TABLE):
        dynamodb.put_item(TableName=TABLE, Item=_open("moving", "complete"))
        dynamodb.put_item(TableName=TABLE, Item=_open("new", "acquire"))
        keys = [{"id": {"S": "moving"}}, {"id": {"S": "new"}}]

        def steps(answer: Any) -> dict[str, str]:
            return {item["id"]["S"]: item["step"]["S"] for item in answer["Responses"][TABLE]}

        # When both are read in one BatchGetItem, Then without ConsistentRead (asked per table; DynamoDB's default
        # for it as for GetItem) it sees the item as it was and not the new one; with it, every write
        assert steps(dynamodb.batch_get_item(RequestItems={TABLE: {"Keys": keys}})) == {"moving": "evict"}
        consistent = dynamodb.batch_get_item(RequestItems={TABLE: {"Keys": keys, "ConsistentRead": True}})
        assert steps(consistent) == {"moving": "complete", "new": "acquire"}


def test_an_item_deleted_while_the_index_lags_is_still_listed_and_another_tables_index_does_not_lag(
    dynamodb: Any,
) -> None:
    dynamodb.put_item(TableName=TABLE, Item=_open("gone", "evict"))
    with LAG.held("other-*"):
        dynamodb.delete_item(TableName=TABLE, Key={"id": {"S": "gone"}})
        assert _listed(dynamodb) == {}  # (not this table's)
    dynamodb.put_item(TableName=TABLE, Item=_open("gone", "evict"))
    with LAG.held():
        dynamodb.delete_item(TableName=TABLE, Key={"id": {"S": "gone"}})
        assert _listed(dynamodb) == {"gone": "evict"}
        assert _step(dynamodb, "gone") is None
    assert _listed(dynamodb) == {}


def test_the_fault_lags_the_writes_it_draws_and_a_later_write_of_the_item_does_not_overtake_them(
    dynamodb: Any,
) -> None:
    # Given an index lag armed as the sandbox arms faults: the first write to the table takes an hour to reach
    # the index, the others none
    dynamodb.put_item(TableName=TABLE, Item=_open("a", "evict"))
    control = AwsControl(region=REGION)
    control.arm_faults(
        faults=[Fault("lag", "dynamodb-index-lag", target=TABLE, value=3600, limit=1)], seed=1, callers=None
    )

    # When an item is written twice, then another once
    dynamodb.put_item(TableName=TABLE, Item=_open("a", "wait"))
    dynamodb.put_item(TableName=TABLE, Item=_open("a", "complete"))
    dynamodb.put_item(TableName=TABLE, Item=_open("b", "acquire"))

    # Then the item's second write waits for its first (in the order written), the other item's is listed; the
    # firing names the write it lagged
    assert _listed(dynamodb) == {"a": "evict", "b": "acquire"}
    assert [(f.kind, f.detail) for f in control.fault_firings()] == [("dynamodb-index-lag", f"{TABLE} a")]

    # And disarming the plan catches the index up
    control.disarm_faults()
    assert _listed(dynamodb) == {"a": "complete", "b": "acquire"}


def test_a_cancelled_transaction_queues_nothing_for_the_index(dynamodb: Any) -> None:
    # Given an index lagging every write by an hour
    LAG.arm([Fault("lag", "dynamodb-index-lag", value=3600)], seed=1)

    # When a transaction's second write fails its condition (its item exists), after its first was applied
    dynamodb.put_item(TableName=TABLE, Item=_open("taken", "evict"))
    with pytest.raises(ClientError, match="TransactionCanceled"):
        dynamodb.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": TABLE, "Item": _open("fresh", "acquire")}},
                {
                    "Put": {
                        "TableName": TABLE,
                        "Item": _open("taken", "wait"),
                        "ConditionExpression": "attribute_not_exists(id)",
                    }
                },
            ]
        )

    # Then only the write that landed lags: the transaction's is not on its way to the index
    assert LAG.checkpoint().keys() == {("123456789012", REGION, TABLE, *_keys("taken"))}


def _keys(item_id: str) -> tuple[Any, None]:
    from moto.dynamodb.models.dynamo_type import DynamoType

    return DynamoType({"S": item_id}), None
