"""moto's DynamoDB as the sandbox patches it: the same answers as moto's own serialization of them."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core.serialize import BaseJSONSerializer

from nodecycle_sandbox.aws import dynamodb_items

RECORD: dict[str, Any] = {  # the shape of a lifecycle record: strings, numbers, maps and lists of them
    "id": {"S": "i-0abc:terminate:token"},
    "seq": {"N": "7"},
    "state": {"S": "draining"},
    "started_at": {"S": "2026-12-03T16:00:00Z"},
    "extra": {
        "M": {
            "done_starts": {"L": [{"S": "2026-12-01T00:00:00Z"}, {"S": "2026-12-02T00:00:00Z"}]},
            "earlier_drain": {"M": {"record": {"S": "r-1"}, "at": {"N": "1764777600.25"}}},
            "empty": {"M": {}},
            "none": {"L": []},
        }
    },
    "flags": {"M": {"cordoned": {"BOOL": True}, "gone": {"BOOL": False}, "note": {"NULL": True}}},
    "zones": {"SS": ["eu-west-1a", "eu-west-1b"]},
    "counts": {"NS": ["1", "2.5"]},
}
BINARY: dict[str, Any] = {  # what the walk changes (base64), so the patch must leave it to the walk
    "id": {"S": "binary"},
    "blob": {"B": b"\x00\x01nodecycle"},
    "blobs": {"BS": [b"a", b"b"]},
    "nested": {"M": {"blob": {"B": b"\xff"}, "list": {"L": [{"B": b"x"}, {"S": "y"}]}}},
}


@pytest.fixture
def table() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        client.create_table(
            TableName="records",
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        for item in (RECORD, BINARY):
            client.put_item(TableName="records", Item=item)
        yield client


def _answers(client: Any) -> list[Any]:
    def read(key: str) -> Any:
        return client.get_item(TableName="records", Key={"id": {"S": key}}, ConsistentRead=True)["Item"]

    failed = None
    try:  # a refused conditional write answers the item it found
        client.put_item(
            TableName="records",
            Item={"id": RECORD["id"]},
            ConditionExpression="attribute_not_exists(id)",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
    except client.exceptions.ConditionalCheckFailedException as error:
        failed = error.response.get("Item")
    scanned = sorted(client.scan(TableName="records")["Items"], key=lambda item: item["id"]["S"])
    return [read(RECORD["id"]["S"]), read("binary"), failed, scanned]


def test_every_answer_is_the_one_moto_s_own_serialization_gives(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the answers of moto's own serialization of reads, a refused write and a scan
    current = BaseJSONSerializer._serialize_type_structure
    walk = getattr(current, "__wrapped__", current)  # moto's own, whether or not installed already
    monkeypatch.setattr(BaseJSONSerializer, "_serialize_type_structure", walk)
    walked = _answers(table)
    assert walked[0] == RECORD  # the reference itself is right
    assert walked[2] == RECORD

    # When the patch is installed (undone after the test) and the same requests are made
    dynamodb_items.install()
    assert BaseJSONSerializer._serialize_type_structure is not walk
    served = _answers(table)

    # Then every answer is the same, binary values included
    assert served == walked


def test_only_values_the_walk_leaves_unchanged_skip_it() -> None:
    assert all(dynamodb_items.in_wire_form(value) for value in RECORD.values())
    assert not any(dynamodb_items.in_wire_form(value) for value in (BINARY["blob"], BINARY["blobs"]))
    assert not dynamodb_items.in_wire_form(BINARY["nested"])  # a binary value anywhere below
    assert not dynamodb_items.in_wire_form({"N": 7})  # a number moto kept as a number: the walk makes it text
    assert not dynamodb_items.in_wire_form({"S": "a", "N": "1"})  # not one kind
