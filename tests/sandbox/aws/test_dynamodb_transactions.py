"""moto's DynamoDB transactions as the sandbox patches them: a cancelled one undoes its own writes only."""

from __future__ import annotations

import threading
from typing import Any

import boto3
import pytest
from moto.dynamodb import models

from nodecycle_sandbox.aws import dynamodb_transactions
from tests.sandbox.aws.conftest import RECORDS_TABLE as TABLE


@pytest.fixture
def dynamodb(records_table: Any) -> Any:
    """The conftest's table, moto patched as the sandbox patches it (a class's methods: for every backend)."""
    dynamodb_transactions.install()
    return records_table


def _put(item_id: str, condition: str = "attribute_not_exists(id)") -> dict[str, Any]:
    return {"Put": {"TableName": TABLE, "Item": {"id": {"S": item_id}}, "ConditionExpression": condition}}


def test_a_cancelled_transaction_keeps_a_write_made_to_another_item_meanwhile(
    dynamodb: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a transaction whose second write's condition fails (its item exists), and another request's write
    # to an item the transaction does not touch, made while the transaction is being decided
    dynamodb.put_item(TableName=TABLE, Item={"id": {"S": "taken"}})
    other = boto3.client("dynamodb", region_name="eu-west-1")
    writer = threading.Thread(target=lambda: other.put_item(TableName=TABLE, Item={"id": {"S": "meanwhile"}}))
    decide = models.get_filter_expression

    def deciding(*args: Any, **kwargs: Any) -> Any:
        if not writer.is_alive() and writer.ident is None:
            writer.start()
            writer.join(timeout=1.0)  # done at once if the write need not wait for the transaction
        return decide(*args, **kwargs)

    monkeypatch.setattr(models, "get_filter_expression", deciding)

    # When the transaction is cancelled
    with pytest.raises(dynamodb.exceptions.TransactionCanceledException) as cancelled:
        dynamodb.transact_write_items(TransactItems=[_put("mine"), _put("taken")])
    writer.join()

    # Then it undid its own write only: the other request's item is there, as DynamoDB keeps it
    reasons = [reason["Code"] for reason in cancelled.value.response["CancellationReasons"]]
    assert reasons == ["None", "ConditionalCheckFailed"]
    kept = {item["id"]["S"] for item in dynamodb.scan(TableName=TABLE)["Items"]}
    assert kept == {"taken", "meanwhile"}


def test_a_transaction_that_succeeds_writes_all_its_items_and_one_cancelled_none(dynamodb: Any) -> None:
    dynamodb.transact_write_items(TransactItems=[_put("a"), _put("b")])
    with pytest.raises(dynamodb.exceptions.TransactionCanceledException):
        dynamodb.transact_write_items(TransactItems=[_put("c"), _put("a")])
    assert {item["id"]["S"] for item in dynamodb.scan(TableName=TABLE)["Items"]} == {"a", "b"}
